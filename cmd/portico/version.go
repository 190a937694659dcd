package main

import (
	"encoding/json"
	"fmt"
	"io"

	"portico.dev/portico/internal/shared/buildinfo"
)

// printVersion is "portico version": the build, as text or JSON.
func printVersion(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("version", stderr)
	output := fs.String("o", "text", "output format: text or json")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	info := buildinfo.Read()
	switch *output {
	case "text":
		_, err := fmt.Fprintf(stdout, "portico %s\ncommit: %s\ngo: %s\n", info.Version, info.Commit, info.GoVersion)
		return err
	case "json":
		return json.NewEncoder(stdout).Encode(info)
	default:
		return fmt.Errorf("-o: %q is neither text nor json", *output)
	}
}
