package buildinfo

import (
	"runtime"
	"runtime/debug"
	"testing"
)

func TestFromBuild(t *testing.T) {
	vcs := &debug.BuildInfo{GoVersion: "go1.26.1", Main: debug.Module{Path: "portico.dev/portico", Version: "(devel)"},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "0123abcd"}, {Key: "vcs.modified", Value: "true"}}}
	for _, c := range []struct {
		name         string
		bi           *debug.BuildInfo
		link, commit string
		want         Info
	}{
		{"no build information", nil, "", "", Info{"(devel)", "unknown", "unknown"}},
		{"working tree with changes", vcs, "", "", Info{"(devel)", "0123abcd-dirty", "go1.26.1"}},
		{"clean tree", &debug.BuildInfo{GoVersion: "go1.26.1", Main: debug.Module{Version: "v0.3.0"},
			Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "0123abcd"}, {Key: "vcs.modified", Value: "false"}}},
			"", "", Info{"v0.3.0", "0123abcd", "go1.26.1"}},
		{"without VCS stamping", &debug.BuildInfo{GoVersion: "go1.26.1", Main: debug.Module{Version: "(devel)"}}, "", "", Info{"(devel)", "unknown", "go1.26.1"}},
		{"link-time values win", vcs, "v1.0.0", "feedface", Info{"v1.0.0", "feedface", "go1.26.1"}},
	} {
		if got := fromBuild(c.bi, c.link, c.commit); got != c.want {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
	}
}

// The test binary carries build information too: Read reports the Go
// release that compiled it.
func TestReadRunningBinary(t *testing.T) {
	if got := Read().GoVersion; got != runtime.Version() {
		t.Errorf("GoVersion %q, want %q", got, runtime.Version())
	}
}
