package main

import (
	"flag"
	"fmt"

	"portico.dev/portico/config"
	"portico.dev/portico/proxy"
)

// requestFlags are the flags of what a request must satisfy before a route
// sees it (README "Security").
type requestFlags struct {
	mergeSlashes   *bool
	escapedSlashes *string
	maxHeaders     *int
	maxHeaderBytes *int
}

func newRequestFlags(fs *flag.FlagSet) *requestFlags {
	d := proxy.DefaultOptions()
	return &requestFlags{
		mergeSlashes:   fs.Bool("merge-slashes", true, "merge repeated slashes in request paths (\"//\" is \"/\") before routing and forwarding"),
		escapedSlashes: fs.String("escaped-slashes", config.EscapedSlashReject.String(), "what to do with %2F, %5C and \\ in request paths: reject (400), keep (as part of their segment; only for backends that never decode them into separators) or unescape (into \"/\", before dot segments are resolved)"),
		maxHeaders:     fs.Int("max-request-headers", d.MaxHeaderCount, "most header fields a request may have; more get 431"),
		maxHeaderBytes: fs.Int("max-request-header-bytes", d.MaxHeaderBytes, "most bytes of a request's line and headers (HTTP/1) or header list (HTTP/2); more get 431"),
	}
}

// apply sets the flags' values in opts.
func (f *requestFlags) apply(opts *proxy.Options) error {
	action, err := config.ParseEscapedSlashAction(*f.escapedSlashes)
	if err != nil {
		return fmt.Errorf("--escaped-slashes: %w", err)
	}
	if *f.maxHeaders < 1 || *f.maxHeaderBytes < 1 {
		return fmt.Errorf("--max-request-headers and --max-request-header-bytes must be positive")
	}
	opts.Paths = config.PathOptions{KeepEmptySegments: !*f.mergeSlashes, EscapedSlashes: action}
	opts.MaxHeaderCount = *f.maxHeaders
	opts.MaxHeaderBytes = *f.maxHeaderBytes
	return nil
}
