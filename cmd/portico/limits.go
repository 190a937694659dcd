package main

import (
	"flag"

	"portico.dev/portico/proxy"
)

// flagSet reports whether the flag name was given on the command line.
func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// limitFlags declares the flags of the data plane's abuse limits (see the
// README's Security section) and returns what sets them on the options.
func limitFlags(fs *flag.FlagSet) func(*proxy.Options) {
	d := proxy.DefaultOptions()
	maxConns := fs.Int("max-connections-per-port", d.MaxConnsPerPort, "open connections each port accepts; past it new ones are reset at once (negative: no cap). Left unset, it is lowered to what the open files limit fits for the ports bound")
	perClient := fs.Int("max-connections-per-client", d.MaxConnsPerClient, "open connections of one client IP address each port accepts; past it that address's new ones are reset at once, other clients' still served (0 or negative: no cap; raise it when clients reach Portico through a NAT or a load balancer that hides their addresses)")
	idle := fs.Duration("client-idle-timeout", d.ClientIdleTimeout, "cut a request whose body read or response write waits this long on the client without progress (negative: never)")
	rate := fs.Int("client-min-rate", d.ClientMinRate, "bytes per second a client must move while Portico waits on it, averaged over --client-rate-window; applies to responses and to request bodies of declared length (negative: no minimum)")
	window := fs.Duration("client-rate-window", d.ClientRateWindow, "time spent waiting on a client over which --client-min-rate is averaged")
	glitches := fs.Int("http2-max-glitches", d.H2MaxGlitches, "abusive frames (streams reset before their response, surplus SETTINGS, PING, PRIORITY, empty DATA, WINDOW_UPDATE) an HTTP/2 connection may send in a burst before GOAWAY ENHANCE_YOUR_CALM (negative: no limit)")
	streamIdle := fs.Duration("stream-idle-timeout", d.StreamIdleTimeout, "close a TLS stream (TLSRoute) or a TCP listener's connection (TCPRoute) after this long without a byte either way (negative: never)")
	udpSessions := fs.Int("udp-max-sessions-per-port", d.MaxUDPSessionsPerPort, "UDP sessions (client address and port) each UDP port keeps, each with a socket to its backend; when full, a new client evicts the oldest session that carried a single datagram, or is dropped when every session carried more (0 or negative: no cap)")
	udpIdle := fs.Duration("udp-session-idle-timeout", d.UDPIdleTimeout, "end a UDP session (UDPRoute) after this long without a datagram either way (negative: never)")
	max1xx := fs.Int("max-informational-responses", d.MaxInformational, "informational (1xx) answers of a backend relayed per request; past it the backend has failed: 502, or the answer cut if it had started (0 or negative: no cap)")
	headTimeout := fs.Duration("backend-response-timeout", d.BackendResponseTimeout, "how long a backend may take to send the head of its answer, for routes that set no timeouts of their own (never for Knative's); past it the client gets 504 (0: no bound)")
	forgiven := fs.Float64("http2-glitches-forgiven", d.H2GlitchesForgiven, "abusive HTTP/2 frames forgotten per second")
	return func(o *proxy.Options) {
		o.MaxConnsPerPort = *maxConns
		// A cap the operator did not set is fitted to the open files
		// limit; one they set is kept, and warned about if it cannot fit.
		o.FitConnCaps = !flagSet(fs, "max-connections-per-port")
		// Zero is the options' default; the flag's zero turns the cap off.
		o.MaxConnsPerClient = *perClient
		if *perClient <= 0 {
			o.MaxConnsPerClient = -1
		}
		o.ClientIdleTimeout = *idle
		o.ClientMinRate = *rate
		o.ClientRateWindow = *window
		o.H2MaxGlitches = *glitches
		o.H2GlitchesForgiven = *forgiven
		o.StreamIdleTimeout = *streamIdle
		o.MaxUDPSessionsPerPort = *udpSessions
		if *udpSessions <= 0 {
			o.MaxUDPSessionsPerPort = -1
		}
		o.UDPIdleTimeout = *udpIdle
		o.BackendResponseTimeout = *headTimeout
		if *headTimeout <= 0 {
			o.BackendResponseTimeout = -1
		}
		o.MaxInformational = *max1xx
		if *max1xx <= 0 {
			o.MaxInformational = -1
		}
	}
}
