package clienthello

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"testing"
	"time"
)

// helloBytes is the first flight crypto/tls sends for serverName: one
// record holding the ClientHello.
func helloBytes(t testing.TB, serverName string) []byte {
	t.Helper()
	client, server := net.Pipe()
	defer server.Close()
	go func() {
		c := tls.Client(client, &tls.Config{ServerName: serverName, InsecureSkipVerify: true})
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = c.HandshakeContext(ctx)
		client.Close()
	}()
	hdr := make([]byte, 5)
	if _, err := io.ReadFull(server, hdr); err != nil {
		t.Fatal(err)
	}
	body := make([]byte, int(hdr[3])<<8|int(hdr[4]))
	if _, err := io.ReadFull(server, body); err != nil {
		t.Fatal(err)
	}
	return append(hdr, body...)
}

// split re-frames one handshake record into records of at most size bytes.
func split(rec []byte, size int) []byte {
	body := rec[5:]
	var out []byte
	for len(body) > 0 {
		k := min(size, len(body))
		out = append(out, 22, 3, 1, byte(k>>8), byte(k))
		out = append(out, body[:k]...)
		body = body[k:]
	}
	return out
}

func TestRead(t *testing.T) {
	rec := helloBytes(t, "www.example.com")
	for _, size := range []int{1, 3, 4, 5, 100, len(rec)} {
		in := split(rec, size)
		after := []byte("next flight")
		r := bytes.NewReader(append(append([]byte{}, in...), after...))
		raw, name, err := Read(r)
		if err != nil || name != "www.example.com" {
			t.Fatalf("records of %d: %q, %v", size, name, err)
		}
		if !bytes.Equal(raw, in) {
			t.Fatalf("records of %d: raw is not what was read", size)
		}
		if rest, _ := io.ReadAll(r); !bytes.Equal(rest, after) {
			t.Fatalf("records of %d: read past the ClientHello: left %q", size, rest)
		}
	}
	if _, name, err := Read(bytes.NewReader(helloBytes(t, ""))); err != nil || name != "" {
		t.Fatalf("no SNI: %q, %v", name, err)
	}
}

func TestReadMalformed(t *testing.T) {
	rec := helloBytes(t, "a.example.com")
	cases := map[string][]byte{
		"plain HTTP":        []byte("GET / HTTP/1.1\r\n\r\n"),
		"alert record":      {21, 3, 1, 0, 2, 2, 40},
		"empty record":      {22, 3, 1, 0, 0},
		"oversized record":  {22, 3, 1, 0x40, 0x01},
		"server hello":      {22, 3, 1, 0, 4, 2, 0, 0, 0},
		"huge hello":        {22, 3, 1, 0, 4, 1, 0xff, 0xff, 0xff},
		"truncated body":    append(append([]byte{}, rec[:5]...), rec[5:9]...),
		"closed mid record": rec[:len(rec)-1],
	}
	// A ClientHello whose declared length runs past its extensions.
	bad := append([]byte{}, rec...)
	bad[len(bad)-1] ^= 0xff
	bad[9+2+32] = 0xff // session id length beyond the body
	cases["bad session id"] = bad
	for name, in := range cases {
		_, sn, err := Read(bytes.NewReader(in))
		if err == nil {
			t.Errorf("%s: accepted, server name %q", name, sn)
		}
	}
	if _, _, err := Read(bytes.NewReader([]byte("GET /"))); !errors.Is(err, ErrNotTLS) {
		t.Errorf("plain HTTP: %v, want ErrNotTLS", err)
	}
}

// FuzzServerName checks the parser against crypto/tls: whatever
// crypto/tls reads as a ClientHello's server name, Read reads too, and
// no input makes Read panic or read more than the records it parsed.
func FuzzServerName(f *testing.F) {
	for _, n := range []string{"a.example.com", "", "xn--bcher-kva.example"} {
		rec := helloBytes(f, n)
		f.Add(rec)
		f.Add(split(rec, 9))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		raw, name, err := Read(bytes.NewReader(in))
		if len(raw) > len(in) || !bytes.Equal(raw, in[:len(raw)]) {
			t.Fatalf("raw is not a prefix of the input")
		}
		want, ok := referenceServerName(in)
		if !ok {
			return
		}
		if err != nil || name != want {
			t.Fatalf("crypto/tls reads server name %q; Read: %q, %v", want, name, err)
		}
	})
}

// referenceServerName runs crypto/tls's server over in and reports the
// server name of the ClientHello it parsed, if it parsed one.
func referenceServerName(in []byte) (string, bool) {
	var got *tls.ClientHelloInfo
	stop := errors.New("stop")
	c := tls.Server(&readOnly{r: bytes.NewReader(in)}, &tls.Config{
		GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) {
			got = h
			return nil, stop
		},
	})
	_ = c.Handshake()
	if got == nil {
		return "", false
	}
	return got.ServerName, true
}

type readOnly struct {
	net.Conn
	r io.Reader
}

func (c *readOnly) Read(p []byte) (int, error)       { return c.r.Read(p) }
func (c *readOnly) Write(p []byte) (int, error)      { return len(p), nil }
func (c *readOnly) Close() error                     { return nil }
func (c *readOnly) SetDeadline(time.Time) error      { return nil }
func (c *readOnly) SetReadDeadline(time.Time) error  { return nil }
func (c *readOnly) SetWriteDeadline(time.Time) error { return nil }
func (c *readOnly) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (c *readOnly) LocalAddr() net.Addr              { return &net.TCPAddr{} }
