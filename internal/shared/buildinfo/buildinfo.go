// Package buildinfo says which build of Portico is running: its version,
// the commit it was built from and the Go release that compiled it.
package buildinfo

import (
	"runtime/debug"
)

// Set at link time by builds that know better than the Go toolchain
// (a container image built without the .git directory):
//
//	go build -ldflags "-X portico.dev/portico/internal/shared/buildinfo.version=v1.2.3 -X portico.dev/portico/internal/shared/buildinfo.commit=abc123"
//
// They are never written at run time.
var (
	version string
	commit  string
)

// Info describes one build.
type Info struct {
	// Version is the module version ("v1.2.3"), or "(devel)" for a build
	// from a working tree.
	Version string `json:"version"`
	// Commit is the VCS revision, with "-dirty" when the tree had changes,
	// or "unknown" when the build recorded none (-buildvcs=false).
	Commit string `json:"commit"`
	// GoVersion is the Go release that compiled the binary.
	GoVersion string `json:"goVersion"`
}

// Read returns the running binary's build information.
func Read() Info {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return fromBuild(nil, version, commit)
	}
	return fromBuild(bi, version, commit)
}

// fromBuild combines what the toolchain recorded with the link-time
// values, which win when set.
func fromBuild(bi *debug.BuildInfo, linkVersion, linkCommit string) Info {
	info := Info{Version: "(devel)", Commit: "unknown", GoVersion: "unknown"}
	if bi != nil {
		info.GoVersion = bi.GoVersion
		if v := bi.Main.Version; v != "" {
			info.Version = v
		}
		var revision string
		modified := false
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				revision = s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
		if revision != "" {
			info.Commit = revision
			if modified {
				info.Commit += "-dirty"
			}
		}
	}
	if linkVersion != "" {
		info.Version = linkVersion
	}
	if linkCommit != "" {
		info.Commit = linkCommit
	}
	return info
}
