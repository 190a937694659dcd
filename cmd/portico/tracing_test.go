package main

import (
	"io"
	"strings"
	"testing"
)

// TestTracingFlags: a tracing configuration that cannot work is refused
// when the flags are read, naming what is wrong; tracing is off without an
// endpoint whatever the other flags say.
func TestTracingFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string // "" for no error
	}{
		{[]string{"--tracing-protocol", "udp"}, ""},
		{[]string{"--tracing-endpoint", "collector:4317"}, ""},
		{[]string{"--tracing-endpoint", "collector:4318", "--tracing-protocol", "http", "--tracing-sample-ratio", "1"}, ""},
		{[]string{"--tracing-endpoint", "collector:4317", "--tracing-protocol", "udp"}, `protocol "udp"`},
		{[]string{"--tracing-endpoint", "collector:4317", "--tracing-sample-ratio", "1.5"}, "sample ratio 1.5"},
		{[]string{"--tracing-endpoint", "collector"}, `endpoint "collector"`},
	} {
		f, err := parseServeFlags(append([]string{"--config", "x.yaml"}, c.args...), io.Discard)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%v: %v", c.args, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%v: error %v, want one with %q", c.args, err, c.want)
		case c.want == "" && *f.tracing.endpoint == "":
			if tr, err := f.tracing.start(t.Context()); tr != nil || err != nil {
				t.Errorf("%v: tracer %v, %v; want off", c.args, tr, err)
			}
		}
	}
}
