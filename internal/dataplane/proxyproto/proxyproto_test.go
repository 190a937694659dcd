package proxyproto

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net/netip"
	"testing"
	"testing/iotest"
)

func v2(cmd, fam byte, addr []byte, extra int) []byte {
	b := []byte(v2Sig)
	b = append(b, 0x20|cmd, fam)
	b = binary.BigEndian.AppendUint16(b, uint16(len(addr)+extra))
	b = append(b, addr...)
	return append(b, make([]byte, extra)...)
}

// TestRead: headers of both versions, read byte by byte (a client sending
// them in pieces) and whole, give their addresses and hand back what
// follows them.
func TestRead(t *testing.T) {
	ip4 := []byte{203, 0, 113, 7, 192, 0, 2, 1, 0x1f, 0x90, 0, 80}
	for name, tc := range map[string]struct {
		in   []byte
		want Header
	}{
		"v1 TCP4":    {[]byte("PROXY TCP4 203.0.113.7 192.0.2.1 8080 80\r\n"), Header{Version: 1, Source: netip.MustParseAddrPort("203.0.113.7:8080"), Dest: netip.MustParseAddrPort("192.0.2.1:80")}},
		"v1 UNKNOWN": {[]byte("PROXY UNKNOWN\r\n"), Header{Version: 1, Local: true}},
		"v2 IPv4":    {v2(1, 0x11, ip4, 0), Header{Version: 2, Source: netip.MustParseAddrPort("203.0.113.7:8080"), Dest: netip.MustParseAddrPort("192.0.2.1:80")}},
		"v2 TLVs":    {v2(1, 0x11, ip4, 3000), Header{Version: 2, Source: netip.MustParseAddrPort("203.0.113.7:8080"), Dest: netip.MustParseAddrPort("192.0.2.1:80")}},
		"v2 LOCAL":   {v2(0, 0x00, nil, 0), Header{Version: 2, Local: true}},
		"v2 UNIX":    {v2(1, 0x31, make([]byte, 216), 0), Header{Version: 2, Local: true}},
	} {
		for _, oneByte := range []bool{false, true} {
			var r io.Reader = bytes.NewReader(append(tc.in, "GET /"...))
			if oneByte {
				r = iotest.OneByteReader(r)
			}
			h, rest, err := Read(r)
			if err != nil || h != tc.want {
				t.Errorf("%s (one byte %v): %+v %v, want %+v", name, oneByte, h, err, tc.want)
				continue
			}
			after, _ := io.ReadAll(r)
			if got := string(rest) + string(after); got != "GET /" {
				t.Errorf("%s (one byte %v): %q follows the header, want %q", name, oneByte, got, "GET /")
			}
		}
	}
}

// TestReadRefuses: what is not a header, and headers that are wrong or
// cut short.
func TestReadRefuses(t *testing.T) {
	if _, rest, err := Read(bytes.NewReader([]byte("GET / HTTP/1.1\r\n"))); !errors.Is(err, ErrNoHeader) || string(rest) != "GET / HTTP/1.1\r\n" {
		t.Errorf("HTTP request: %q %v, want ErrNoHeader with the bytes read", rest, err)
	}
	for name, in := range map[string][]byte{
		"v1 long":       append([]byte("PROXY TCP4 "), bytes.Repeat([]byte("1"), 200)...),
		"v1 bad ip":     []byte("PROXY TCP4 1.2.3 1.2.3.4 1 2\r\n"),
		"v1 zone":       []byte("PROXY TCP6 fe80::1%eth0 fe80::2 1 2\r\n"),
		"v2 version 3":  append([]byte(v2Sig), 0x31, 0x11, 0, 12),
		"v2 family 4":   append([]byte(v2Sig), 0x21, 0x41, 0, 12),
		"v2 short addr": v2(1, 0x21, make([]byte, 12), 0),
		"v2 cut TLVs":   v2(1, 0x11, make([]byte, 12), 100)[:40],
		"cut signature": []byte(v2Sig[:7]),
	} {
		if _, _, err := Read(bytes.NewReader(in)); err == nil || errors.Is(err, ErrNoHeader) {
			t.Errorf("%s: %v, want an error", name, err)
		}
	}
}

// FuzzRead: no input panics, and what Read hands back is part of it.
func FuzzRead(f *testing.F) {
	f.Add([]byte("PROXY TCP4 1.2.3.4 5.6.7.8 1 2\r\nGET"))
	f.Add(v2(1, 0x21, make([]byte, 36), 4))
	f.Fuzz(func(t *testing.T, in []byte) {
		_, rest, _ := Read(bytes.NewReader(in))
		if len(rest) > len(in) || !bytes.Contains(in, rest) {
			t.Fatalf("rest %q is not part of %q", rest, in)
		}
	})
}
