package proxy

import "flag"

// http1Server runs the package's tests against either HTTP/1 server:
// go test ./proxy/ -args -http1-server=go
var http1Server = flag.String("http1-server", "", "HTTP/1 server of the runtimes the tests start (portico, go); empty: the default")

// testOptions are opts with the HTTP/1 server the tests were asked for.
func testOptions(opts Options) Options {
	if *http1Server != "" {
		opts.HTTP1Server = *http1Server
	}
	return opts
}

// goHTTP1 reports whether the tests run against net/http's server, whose
// parser is more lenient than Portico's.
func goHTTP1() bool { return *http1Server == HTTP1Go }
