package proxy

import (
	"fmt"
	"net"
	"net/netip"

	"portico.dev/portico/config"
	"portico.dev/portico/internal/dataplane/proxyproto"
)

// sendProxyHeader starts backend, a connection just made for client, with
// the PROXY header pp asks for (none when pp is nil): the client's
// address as Portico knows it (a PROXY header the port read included,
// clienttraffic.go) and the address it reached Portico at. A client
// without an IP address is written as an unknown one.
func sendProxyHeader(backend net.Conn, pp *config.BackendProxyProtocol, client net.Conn) error {
	if pp == nil {
		return nil
	}
	h := proxyproto.Header{Version: pp.Version, Source: tcpAddrPort(client.RemoteAddr()), Dest: tcpAddrPort(client.LocalAddr())}
	// Nothing else has been written to the new socket: its buffer takes
	// the header at once.
	if _, err := backend.Write(h.Append(make([]byte, 0, 64))); err != nil {
		return fmt.Errorf("send PROXY protocol v%d header to %s: %w", pp.Version, backend.RemoteAddr(), err)
	}
	return nil
}

// tcpAddrPort is a's address and port; zero when a is not a TCP one.
func tcpAddrPort(a net.Addr) netip.AddrPort {
	if t, ok := a.(*net.TCPAddr); ok {
		return t.AddrPort()
	}
	return netip.AddrPort{}
}
