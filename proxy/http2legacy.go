//go:build go1.27 && !http2legacy

package proxy

// Portico's HTTP/2 abuse guard (h2guard.go) sits between x/net's HTTP/2
// server and the socket: it reads what that server reads and answers abuse
// with a connection error that the server turns into GOAWAY
// ENHANCE_YOUR_CALM. From Go 1.27, x/net hands HTTP/2 to net/http's own
// server unless built with the http2legacy tag, and net/http's neither
// takes TLS connections through the guard nor knows its error. A build
// without the tag would serve HTTP/2 unguarded, so it does not compile:
// build and test with GOFLAGS=-tags=http2legacy (the scripts, .ci/run, the
// README's commands and the Dockerfile set it).
var _ int = "Portico must be built with GOFLAGS=-tags=http2legacy (see proxy/http2legacy.go)"
