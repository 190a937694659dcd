package main

import (
	"flag"
	"io"
	"testing"

	"portico.dev/portico/config"
	"portico.dev/portico/proxy"
)

func TestRequestFlags(t *testing.T) {
	parse := func(args ...string) (proxy.Options, error) {
		fs := flag.NewFlagSet("serve", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		rf := newRequestFlags(fs)
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		opts := proxy.DefaultOptions()
		return opts, rf.apply(&opts)
	}
	opts, err := parse()
	if err != nil || opts.Paths != (config.PathOptions{}) || opts.MaxHeaderCount != proxy.DefaultOptions().MaxHeaderCount {
		t.Errorf("defaults: %+v, %v", opts, err)
	}
	opts, err = parse("--merge-slashes=false", "--escaped-slashes=unescape", "--max-request-headers=50", "--max-request-header-bytes=8192")
	want := config.PathOptions{KeepEmptySegments: true, EscapedSlashes: config.EscapedSlashUnescape}
	if err != nil || opts.Paths != want || opts.MaxHeaderCount != 50 || opts.MaxHeaderBytes != 8192 {
		t.Errorf("set: %+v, %v", opts, err)
	}
	for _, bad := range [][]string{{"--escaped-slashes=decode"}, {"--max-request-headers=0"}} {
		if _, err := parse(bad...); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
}
