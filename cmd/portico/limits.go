package main

import (
	"flag"

	"portico.dev/portico/proxy"
)

// limitFlags declares the flags of the data plane's abuse limits (see the
// README's Security section) and returns what sets them on the options.
func limitFlags(fs *flag.FlagSet) func(*proxy.Options) {
	d := proxy.DefaultOptions()
	maxConns := fs.Int("max-connections-per-port", d.MaxConnsPerPort, "open connections each port accepts; past it new ones are reset at once (negative: no cap)")
	idle := fs.Duration("client-idle-timeout", d.ClientIdleTimeout, "cut a request whose body read or response write waits this long on the client without progress (negative: never)")
	rate := fs.Int("client-min-rate", d.ClientMinRate, "bytes per second a client must move while Portico waits on it, averaged over --client-rate-window; applies to responses and to request bodies of declared length (negative: no minimum)")
	window := fs.Duration("client-rate-window", d.ClientRateWindow, "time spent waiting on a client over which --client-min-rate is averaged")
	glitches := fs.Int("http2-max-glitches", d.H2MaxGlitches, "abusive frames (streams reset before their response, surplus SETTINGS, PING, PRIORITY, empty DATA, WINDOW_UPDATE) an HTTP/2 connection may send in a burst before GOAWAY ENHANCE_YOUR_CALM (negative: no limit)")
	streamIdle := fs.Duration("stream-idle-timeout", d.StreamIdleTimeout, "close a TLS stream (TLSRoute) after this long without a byte either way (negative: never)")
	forgiven := fs.Float64("http2-glitches-forgiven", d.H2GlitchesForgiven, "abusive HTTP/2 frames forgotten per second")
	return func(o *proxy.Options) {
		o.MaxConnsPerPort = *maxConns
		o.ClientIdleTimeout = *idle
		o.ClientMinRate = *rate
		o.ClientRateWindow = *window
		o.H2MaxGlitches = *glitches
		o.H2GlitchesForgiven = *forgiven
		o.StreamIdleTimeout = *streamIdle
	}
}
