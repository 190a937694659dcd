package proxy

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"portico.dev/portico/config"
)

// v2Header builds a PROXY protocol v2 header: command (0 LOCAL, 1 PROXY)
// from src to dst, with tlvs appended.
func v2Header(cmd byte, src, dst netip.AddrPort, tlvs []byte) []byte {
	var b bytes.Buffer
	b.WriteString("\r\n\r\n\x00\r\nQUIT\n")
	b.WriteByte(0x20 | cmd)
	var addr []byte
	if src.Addr().Is4() {
		b.WriteByte(0x11)
		s, d := src.Addr().As4(), dst.Addr().As4()
		addr = append(append(addr, s[:]...), d[:]...)
	} else {
		b.WriteByte(0x21)
		s, d := src.Addr().As16(), dst.Addr().As16()
		addr = append(append(addr, s[:]...), d[:]...)
	}
	addr = binary.BigEndian.AppendUint16(addr, src.Port())
	addr = binary.BigEndian.AppendUint16(addr, dst.Port())
	addr = append(addr, tlvs...)
	b.Write(binary.BigEndian.AppendUint16(nil, uint16(len(addr))))
	b.Write(addr)
	return b.Bytes()
}

// rawExchange writes pre and an HTTP request on a new connection to p and
// returns the answer's body; err when the connection was closed without
// an answer.
func (p *balanced) rawExchange(pre []byte) (string, error) {
	p.t.Helper()
	c, err := net.Dial("tcp", strings.TrimSuffix(strings.TrimPrefix(p.url, "http://"), "/"))
	if err != nil {
		// A connection refused at once may be reset before the dial
		// returns.
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	msg := append(append([]byte{}, pre...), "GET / HTTP/1.1\r\nHost: x\r\nX-Forwarded-For: 6.6.6.6\r\nConnection: close\r\n\r\n"...)
	if _, err := c.Write(msg); err != nil {
		return "", err
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		return "", errors.New(resp.Status)
	}
	return string(b), nil
}

// TestProxyProtocolHeaders: on real sockets, the address a v1 or v2 (IPv4,
// IPv6, with TLVs) header gives is the client's: the backend sees it in
// X-Forwarded-For, not the peer's nor what the client wrote there. A LOCAL
// command and an UNKNOWN line leave the peer as the client. The bytes
// sent with the header in one write are served.
func TestProxyProtocolHeaders(t *testing.T) {
	p := startClientPolicy(t, nil, &config.ProxyProtocol{})
	dst := netip.MustParseAddrPort("192.0.2.1:80")
	tlvs := []byte{0x01, 0x00, 0x02, 'h', '2', 0xEE, 0x00, 0x03, 1, 2, 3} // ALPN, then one Portico does not know
	for name, tc := range map[string]struct {
		pre  []byte
		want string
	}{
		"v1 TCP4":      {[]byte("PROXY TCP4 203.0.113.7 192.0.2.1 56324 80\r\n"), "203.0.113.7"},
		"v1 TCP6":      {[]byte("PROXY TCP6 2001:db8::7 2001:db8::1 56324 80\r\n"), "2001:db8::7"},
		"v1 UNKNOWN":   {[]byte("PROXY UNKNOWN ffff::1 ffff::2 1 2\r\n"), "127.0.0.1"},
		"v2 IPv4":      {v2Header(1, netip.MustParseAddrPort("203.0.113.8:1000"), dst, nil), "203.0.113.8"},
		"v2 IPv6 TLVs": {v2Header(1, netip.MustParseAddrPort("[2001:db8::8]:1000"), netip.MustParseAddrPort("[2001:db8::1]:443"), tlvs), "2001:db8::8"},
		"v2 LOCAL":     {v2Header(0, netip.MustParseAddrPort("203.0.113.9:1"), dst, nil), "127.0.0.1"},
	} {
		got, err := p.rawExchange(tc.pre)
		if err != nil || got != tc.want {
			t.Errorf("%s: backend saw %q (%v), want %q", name, got, err, tc.want)
		}
	}
}

// TestProxyProtocolAttackRefused: every connection whose header is not to
// be believed is closed without an answer: malformed headers, a header
// from a peer outside the trusted CIDRs, none where one is required, a
// header sent too slowly, and one cut short.
func TestProxyProtocolAttackRefused(t *testing.T) {
	required := startClientPolicy(t, nil, &config.ProxyProtocol{Timeout: 300 * time.Millisecond})
	bad := map[string][]byte{
		"no header":            nil,
		"v1 bad family":        []byte("PROXY TCP5 1.2.3.4 1.2.3.5 1 2\r\n"),
		"v1 family mismatch":   []byte("PROXY TCP4 2001:db8::1 1.2.3.5 1 2\r\n"),
		"v1 port too big":      []byte("PROXY TCP4 1.2.3.4 1.2.3.5 70000 2\r\n"),
		"v1 leading zero port": []byte("PROXY TCP4 1.2.3.4 1.2.3.5 080 2\r\n"),
		"v1 too long":          []byte("PROXY TCP4 " + strings.Repeat("1", 120) + "\r\n"),
		"v1 missing field":     []byte("PROXY TCP4 1.2.3.4 1.2.3.5 1\r\n"),
		"v2 bad version":       append(v2Header(1, netip.MustParseAddrPort("1.2.3.4:1"), netip.MustParseAddrPort("1.2.3.5:2"), nil)[:12:12], 0x31, 0x11, 0, 12),
		"v2 bad command":       append(v2Header(1, netip.MustParseAddrPort("1.2.3.4:1"), netip.MustParseAddrPort("1.2.3.5:2"), nil)[:12:12], 0x2F, 0x11, 0, 12),
		"v2 short length":      append(v2Header(1, netip.MustParseAddrPort("1.2.3.4:1"), netip.MustParseAddrPort("1.2.3.5:2"), nil)[:12:12], 0x21, 0x21, 0, 12),
	}
	for name, pre := range bad {
		if got, err := required.rawExchange(pre); err == nil {
			t.Errorf("%s: answered (backend saw %q), want the connection closed", name, got)
		}
	}
	// Slow and partial headers: cut at the deadline, not waited for.
	for name, part := range map[string][]byte{
		"v1 partial":        []byte("PROXY TCP4 1.2"),
		"v2 partial":        v2Header(1, netip.MustParseAddrPort("1.2.3.4:1"), netip.MustParseAddrPort("1.2.3.5:2"), nil)[:20],
		"v2 TLVs announced": append(v2Header(1, netip.MustParseAddrPort("1.2.3.4:1"), netip.MustParseAddrPort("1.2.3.5:2"), nil)[:14:14], 0xFF, 0xFF),
	} {
		c, err := net.Dial("tcp", strings.TrimPrefix(strings.TrimSuffix(required.url, "/"), "http://"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Write(part); err != nil {
			t.Fatal(err)
		}
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		n, err := c.Read(make([]byte, 1))
		c.Close()
		if n > 0 || errors.Is(err, os.ErrDeadlineExceeded) {
			t.Errorf("%s: connection still open after 10 s (read %d bytes, %v); want it closed at the header deadline", name, n, err)
		}
	}
	// A header from a peer that is not trusted, with or without a header
	// being optional.
	for _, optional := range []bool{false, true} {
		p := startClientPolicy(t, nil, &config.ProxyProtocol{Optional: optional, Trusted: prefixes(t, "10.0.0.0/8")})
		if got, err := p.rawExchange([]byte("PROXY TCP4 203.0.113.7 192.0.2.1 1 80\r\n")); err == nil {
			t.Errorf("optional %v: header from an untrusted peer answered (backend saw %q)", optional, got)
		}
		got, err := p.rawExchange(nil)
		if optional && (err != nil || got != "127.0.0.1") {
			t.Errorf("optional: no header from an untrusted peer: %q %v, want served as from 127.0.0.1", got, err)
		}
		if !optional && err == nil {
			t.Errorf("required: untrusted peer without header answered")
		}
	}
}

// TestProxyProtocolOptional: with the header optional, a connection
// without one is served as from its peer, and one with a header as from
// its client.
func TestProxyProtocolOptional(t *testing.T) {
	p := startClientPolicy(t, nil, &config.ProxyProtocol{Optional: true, Trusted: prefixes(t, "127.0.0.0/8")})
	if got, err := p.rawExchange(nil); err != nil || got != "127.0.0.1" {
		t.Errorf("without header: %q %v, want 127.0.0.1", got, err)
	}
	if got, err := p.rawExchange([]byte("PROXY TCP4 203.0.113.7 192.0.2.1 1 80\r\n")); err != nil || got != "203.0.113.7" {
		t.Errorf("with header: %q %v, want 203.0.113.7", got, err)
	}
}

// TestProxyProtocolThenXFF: the PROXY header's address is the peer that
// clientIPDetection judges: a trusted balancer's header names a trusted
// proxy, whose X-Forwarded-For is then believed.
func TestProxyProtocolThenXFF(t *testing.T) {
	p := startClientPolicy(t, &config.ClientTraffic{Address: &config.ClientAddress{XFFTrustedCIDRs: prefixes(t, "10.0.0.0/8")}},
		&config.ProxyProtocol{Trusted: prefixes(t, "127.0.0.0/8")})
	if got, err := p.rawExchange([]byte("PROXY TCP4 10.0.0.5 192.0.2.1 1 80\r\n")); err != nil || got != "6.6.6.6" {
		t.Errorf("header naming a trusted proxy: %q %v, want its X-Forwarded-For 6.6.6.6", got, err)
	}
	if got, err := p.rawExchange([]byte("PROXY TCP4 203.0.113.7 192.0.2.1 1 80\r\n")); err != nil || got != "203.0.113.7" {
		t.Errorf("header naming a client: %q %v, want 203.0.113.7", got, err)
	}
}
