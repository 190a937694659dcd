package main

import (
	"flag"
	"io"
	"testing"
	"time"

	"portico.dev/portico/proxy"
)

// limitOptions are the proxy options the limit flags in args make of o.
func limitOptions(t *testing.T, o proxy.Options, args ...string) proxy.Options {
	t.Helper()
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	set := limitFlags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	set(&o)
	return o
}

// TestLimitFlags: the limit flags reach the proxy options, and left out
// they keep the proxy's defaults.
func TestLimitFlags(t *testing.T) {
	parse := func(args ...string) proxy.Options {
		o := proxy.DefaultOptions()
		o.MaxConnsPerPort, o.ClientIdleTimeout = 1, time.Nanosecond // overwritten by set
		return limitOptions(t, o, args...)
	}
	if got, want := parse(), proxy.DefaultOptions(); got.MaxConnsPerPort != want.MaxConnsPerPort || got.ClientIdleTimeout != want.ClientIdleTimeout ||
		got.ClientMinRate != want.ClientMinRate || got.ClientRateWindow != want.ClientRateWindow ||
		got.H2MaxGlitches != want.H2MaxGlitches || got.H2GlitchesForgiven != want.H2GlitchesForgiven ||
		got.MaxConnsPerClient != want.MaxConnsPerClient {
		t.Errorf("no flags: %+v, want the defaults %+v", got, want)
	}
	o := parse("--max-connections-per-port=-1", "--client-idle-timeout=5s", "--client-min-rate=100",
		"--client-rate-window=10s", "--http2-max-glitches=50", "--http2-glitches-forgiven=2.5")
	if o.MaxConnsPerPort != -1 || o.ClientIdleTimeout != 5*time.Second || o.ClientMinRate != 100 ||
		o.ClientRateWindow != 10*time.Second || o.H2MaxGlitches != 50 || o.H2GlitchesForgiven != 2.5 {
		t.Errorf("flags not applied: %+v", o)
	}
}

// TestMaxConnectionsPerPortFitted: a cap left to its default is fitted to
// the open files limit; one given on the command line, even the default
// value, is the operator's and stays as given (warned about if it does
// not fit).
func TestMaxConnectionsPerPortFitted(t *testing.T) {
	if o := limitOptions(t, proxy.DefaultOptions()); !o.FitConnCaps {
		t.Error("no --max-connections-per-port: caps not fitted to the open files limit")
	}
	for _, arg := range []string{"--max-connections-per-port=10000", "--max-connections-per-port=500", "--max-connections-per-port=-1"} {
		if o := limitOptions(t, proxy.DefaultOptions(), arg); o.FitConnCaps {
			t.Errorf("%s: caps fitted, want the operator's kept", arg)
		}
	}
}

// TestMaxConnectionsPerClientFlag: the flag's value reaches the options,
// and its zero turns the cap off (the options' zero would be the default).
func TestMaxConnectionsPerClientFlag(t *testing.T) {
	for arg, want := range map[string]int{"--max-connections-per-client=50": 50, "--max-connections-per-client=0": -1, "--max-connections-per-client=-3": -1} {
		o := limitOptions(t, proxy.DefaultOptions(), arg)
		if o.MaxConnsPerClient != want {
			t.Errorf("%s: MaxConnsPerClient %d, want %d", arg, o.MaxConnsPerClient, want)
		}
	}
}

// TestMaxInformationalResponsesFlag: the cap on relayed 1xx heads reaches
// the options, 10 by default, and its zero turns the cap off.
func TestMaxInformationalResponsesFlag(t *testing.T) {
	for arg, want := range map[string]int{"": 10, "--max-informational-responses=3": 3, "--max-informational-responses=0": -1, "--max-informational-responses=-1": -1} {
		var args []string
		if arg != "" {
			args = []string{arg}
		}
		o := limitOptions(t, proxy.DefaultOptions(), args...)
		if o.MaxInformational != want {
			t.Errorf("%q: MaxInformational %d, want %d", arg, o.MaxInformational, want)
		}
	}
}

// TestBackendResponseTimeoutFlag: the backend response timeout reaches the
// options, 60 s by default, and its zero turns it off.
func TestBackendResponseTimeoutFlag(t *testing.T) {
	for arg, want := range map[string]time.Duration{"": time.Minute, "--backend-response-timeout=5s": 5 * time.Second, "--backend-response-timeout=0": -1} {
		var args []string
		if arg != "" {
			args = []string{arg}
		}
		o := limitOptions(t, proxy.DefaultOptions(), args...)
		if o.BackendResponseTimeout != want {
			t.Errorf("%q: BackendResponseTimeout %v, want %v", arg, o.BackendResponseTimeout, want)
		}
	}
}
