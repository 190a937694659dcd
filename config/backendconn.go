package config

import "time"

// BackendConn is how a BackendTrafficPolicy's timeout and tcpKeepalive
// sections treat the connections to a backend. A zero field leaves the
// data plane's own setting (its flags) in force.
type BackendConn struct {
	// ConnectTimeout bounds connecting to an endpoint.
	ConnectTimeout time.Duration
	// IdleTimeout is how long a pooled HTTP/1.1 connection may wait idle
	// and still be used.
	IdleTimeout time.Duration
	// ResponseHeaderTimeout bounds the wait for the head of the answer
	// to each attempt (first byte): past it the client gets 504.
	ResponseHeaderTimeout time.Duration
	// KeepAlive, when set, is the TCP keepalive of the connections
	// opened for the backend.
	KeepAlive *TCPKeepalive
	// Policy is the policy's "namespace/name" (of timeout, else of
	// tcpKeepalive), for logs and dumps.
	Policy string
}

// TCPKeepalive are TCP keepalive probes: the first after Idle without
// traffic, then every Interval, the connection given up after Probes
// unanswered ones.
type TCPKeepalive struct {
	Idle, Interval time.Duration
	Probes         int32
}

// BackendProxyProtocol is a BackendTrafficPolicy's proxyProtocol: a PROXY
// protocol header with the client's address sent ahead of every byte of
// each stream connection (TCPRoute, TLSRoute) to the backend.
type BackendProxyProtocol struct {
	// Version is 1 (text) or 2 (binary, no TLV).
	Version int
	// Policy is the policy's "namespace/name", for logs and dumps.
	Policy string
}
