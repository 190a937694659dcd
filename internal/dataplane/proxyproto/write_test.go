package proxyproto

import (
	"bytes"
	"net/netip"
	"testing"
)

// TestAppend: the bytes of each kind of header are the format's, and
// Read gives back what was written.
func TestAppend(t *testing.T) {
	v4 := Header{Source: netip.MustParseAddrPort("203.0.113.7:8080"), Dest: netip.MustParseAddrPort("192.0.2.1:80")}
	v6 := Header{Source: netip.MustParseAddrPort("[2001:db8::7]:8080"), Dest: netip.MustParseAddrPort("[2001:db8::1]:443")}
	mixed := Header{Source: netip.MustParseAddrPort("203.0.113.7:8080"), Dest: netip.MustParseAddrPort("[2001:db8::1]:443")}
	for name, tc := range map[string]struct {
		version int
		in      Header
		want    []byte
	}{
		"v1 TCP4":    {1, v4, []byte("PROXY TCP4 203.0.113.7 192.0.2.1 8080 80\r\n")},
		"v1 TCP6":    {1, v6, []byte("PROXY TCP6 2001:db8::7 2001:db8::1 8080 443\r\n")},
		"v1 mixed":   {1, mixed, []byte("PROXY TCP6 ::ffff:203.0.113.7 2001:db8::1 8080 443\r\n")},
		"v1 UNKNOWN": {1, Header{}, []byte("PROXY UNKNOWN\r\n")},
		"v2 IPv4":    {2, v4, v2(1, 0x11, []byte{203, 0, 113, 7, 192, 0, 2, 1, 0x1f, 0x90, 0, 80}, 0)},
		"v2 IPv6": {2, v6, v2(1, 0x21, append(append(netip.MustParseAddr("2001:db8::7").AsSlice(),
			netip.MustParseAddr("2001:db8::1").AsSlice()...), 0x1f, 0x90, 0x01, 0xbb), 0)},
		"v2 UNSPEC": {2, Header{Local: true, Source: v4.Source, Dest: v4.Dest}, v2(1, 0x00, nil, 0)},
	} {
		t.Run(name, func(t *testing.T) {
			h := tc.in
			h.Version = tc.version
			got := h.Append([]byte("x"))
			if !bytes.Equal(got[1:], tc.want) {
				t.Fatalf("Append = %q, want %q", got[1:], tc.want)
			}
			back, rest, err := Read(bytes.NewReader(append(got[1:], "tail"...)))
			if err != nil || string(rest) != "tail" {
				t.Fatalf("Read(Append) = %v, rest %q", err, rest)
			}
			if want := expected(h); back != want {
				t.Fatalf("Read(Append(%+v)) = %+v, want %+v", h, back, want)
			}
		})
	}
}

// expected is what Read gives of the header h writes.
func expected(h Header) Header {
	src, dst, ok := h.addrs()
	if !ok {
		return Header{Version: h.Version, Local: true}
	}
	return Header{Version: h.Version, Source: src, Dest: dst}
}

// FuzzAppendRead: any addresses, written in either version, are read
// back as written (after the normal form Append gives them), with the
// bytes after the header untouched.
func FuzzAppendRead(f *testing.F) {
	f.Add(uint8(1), []byte{203, 0, 113, 7}, uint16(8080), []byte{192, 0, 2, 1}, uint16(80), false, []byte("GET /"))
	f.Add(uint8(2), netip.MustParseAddr("2001:db8::7").AsSlice(), uint16(1), []byte{10, 0, 0, 1}, uint16(0), false, []byte{})
	f.Add(uint8(2), []byte{}, uint16(0), []byte{}, uint16(0), true, []byte("\r\n\r\n"))
	f.Fuzz(func(t *testing.T, version uint8, src []byte, sport uint16, dst []byte, dport uint16, local bool, tail []byte) {
		s, _ := netip.AddrFromSlice(src)
		d, _ := netip.AddrFromSlice(dst)
		h := Header{Version: 1 + int(version%2), Local: local,
			Source: netip.AddrPortFrom(s, sport), Dest: netip.AddrPortFrom(d, dport)}
		b := h.Append(nil)
		if len(b) > v1MaxLen && h.Version == 1 {
			t.Fatalf("v1 line of %d bytes", len(b))
		}
		back, rest, err := Read(bytes.NewReader(append(b, tail...)))
		if err != nil {
			t.Fatalf("Read(%q): %v", b, err)
		}
		if want := expected(h); back != want {
			t.Fatalf("Read(Append(%+v)) = %+v, want %+v", h, back, want)
		}
		// Read hands back at most what its reads gave past the header.
		if !bytes.HasPrefix(tail, rest) {
			t.Fatalf("rest %q is not a prefix of %q", rest, tail)
		}
	})
}
