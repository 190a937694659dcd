package main

import (
	"flag"
	"io"
	"math"
	"testing"
)

// TestGCFlags: the flags win over the environment, the environment is read
// for a flag left out, the defaults are no limit and 100, and what cannot be
// a setting is refused.
func TestGCFlags(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		env     map[string]string
		limit   int64
		percent int
		bad     bool
	}{
		{nil, nil, math.MaxInt64, 100, false},
		{nil, map[string]string{"GOMEMLIMIT": "768MiB", "GOGC": "150"}, 768 << 20, 150, false},
		{[]string{"--memory-limit=1GiB", "--gc-percent=200"}, map[string]string{"GOMEMLIMIT": "768MiB", "GOGC": "150"}, 1 << 30, 200, false},
		{[]string{"--memory-limit=4096"}, nil, 4096, 100, false},
		{[]string{"--memory-limit=2KiB", "--gc-percent=off"}, nil, 2048, -1, false},
		{[]string{"--memory-limit=off"}, map[string]string{"GOMEMLIMIT": "1GiB"}, math.MaxInt64, 100, false},
		{[]string{"--gc-percent=off"}, nil, 0, 0, true},
		{[]string{"--memory-limit=1GB"}, nil, 0, 0, true},
		{[]string{"--memory-limit=-5"}, nil, 0, 0, true},
		{[]string{"--memory-limit=99999999999TiB"}, nil, 0, 0, true},
		{[]string{"--gc-percent=0"}, nil, 0, 0, true},
		{nil, map[string]string{"GOGC": "lots"}, 0, 0, true},
	} {
		fs := flag.NewFlagSet("serve", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		g := newGCFlags(fs)
		if err := fs.Parse(tc.args); err != nil {
			t.Fatal(err)
		}
		s, err := g.resolve(func(k string) string { return tc.env[k] })
		if tc.bad {
			if err == nil {
				t.Errorf("%v %v: no error", tc.args, tc.env)
			}
			continue
		}
		if err != nil || s.memoryLimit != tc.limit || s.gcPercent != tc.percent {
			t.Errorf("%v %v: %+v, %v; want limit %d, percent %d", tc.args, tc.env, s, err, tc.limit, tc.percent)
		}
	}
}
