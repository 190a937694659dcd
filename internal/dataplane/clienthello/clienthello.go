// Package clienthello reads the ClientHello that opens a TLS connection,
// record by record and no further, and finds its server name (SNI), so
// that a connection can be routed before, or instead of, being terminated.
// The bytes read are returned to be replayed: to a backend that terminates
// the session itself, or to the local TLS server.
package clienthello

import (
	"errors"
	"fmt"
	"io"

	"golang.org/x/crypto/cryptobyte"
)

const (
	recordHeaderLen    = 5
	recordTypeHS       = 22
	handshakeTypeHello = 1
	// maxRecordLen is the largest TLSPlaintext fragment (RFC 8446 5.1).
	maxRecordLen = 1 << 14
	// MaxHelloLen bounds the ClientHello message a connection may send
	// across its records. Real ones are a few hundred bytes, up to a few
	// kilobytes with post-quantum key shares; crypto/tls refuses more than
	// 64 KiB.
	MaxHelloLen   = 1 << 16
	extServerName = 0
	nameTypeHost  = 0
)

// ErrNotTLS is returned when the first bytes are not a TLS handshake
// record: the connection speaks something else.
var ErrNotTLS = errors.New("not a TLS handshake")

// ErrMalformed is wrapped by the errors of a ClientHello that cannot be
// parsed.
var ErrMalformed = errors.New("malformed ClientHello")

// Read reads from r the records that carry the ClientHello, a message
// that may be split over several records, and returns every byte it read
// and the server name ("" when the client sent none). It reads exactly
// those records, nothing after them. On error, raw still holds what was
// read.
func Read(r io.Reader) (raw []byte, serverName string, err error) {
	raw = make([]byte, 0, 1024)
	var msg []byte // the handshake message, reassembled
	for {
		start := len(raw)
		raw, err = readFull(r, raw, recordHeaderLen)
		if err != nil {
			return raw, "", err
		}
		hdr := raw[start:]
		if hdr[0] != recordTypeHS || hdr[1] != 3 {
			return raw, "", ErrNotTLS
		}
		n := int(hdr[3])<<8 | int(hdr[4])
		if n == 0 || n > maxRecordLen {
			return raw, "", fmt.Errorf("%w: record length %d", ErrMalformed, n)
		}
		raw, err = readFull(r, raw, n)
		if err != nil {
			return raw, "", err
		}
		msg = append(msg, raw[len(raw)-n:]...)
		if len(msg) < 4 {
			continue
		}
		if msg[0] != handshakeTypeHello {
			return raw, "", fmt.Errorf("%w: first handshake message is type %d", ErrMalformed, msg[0])
		}
		want := 4 + (int(msg[1])<<16 | int(msg[2])<<8 | int(msg[3]))
		if want > MaxHelloLen {
			return raw, "", fmt.Errorf("%w: %d bytes", ErrMalformed, want)
		}
		if len(msg) >= want {
			// Bytes past the ClientHello in its last record belong to the
			// next message; a client sends none before the server answers.
			serverName, err = ServerName(msg[4:want])
			return raw, serverName, err
		}
	}
}

// readFull appends n bytes of r to buf.
func readFull(r io.Reader, buf []byte, n int) ([]byte, error) {
	start := len(buf)
	buf = append(buf, make([]byte, n)...)
	m, err := io.ReadFull(r, buf[start:])
	buf = buf[:start+m]
	if errors.Is(err, io.ErrUnexpectedEOF) {
		err = fmt.Errorf("%w: connection closed inside a record", ErrMalformed)
	}
	return buf, err
}

// ServerName parses a ClientHello's body (after the 4-byte handshake
// header) and returns the host name of its server_name extension, "" when
// there is none.
func ServerName(body []byte) (string, error) {
	s := cryptobyte.String(body)
	var sessionID, suites, compression, exts cryptobyte.String
	if !s.Skip(2+32) || // legacy_version, random
		!s.ReadUint8LengthPrefixed(&sessionID) ||
		!s.ReadUint16LengthPrefixed(&suites) ||
		!s.ReadUint8LengthPrefixed(&compression) {
		return "", fmt.Errorf("%w: truncated", ErrMalformed)
	}
	if s.Empty() {
		return "", nil // no extensions at all
	}
	if !s.ReadUint16LengthPrefixed(&exts) || !s.Empty() {
		return "", fmt.Errorf("%w: bad extensions block", ErrMalformed)
	}
	for !exts.Empty() {
		var typ uint16
		var data cryptobyte.String
		if !exts.ReadUint16(&typ) || !exts.ReadUint16LengthPrefixed(&data) {
			return "", fmt.Errorf("%w: bad extension", ErrMalformed)
		}
		if typ != extServerName {
			continue
		}
		return hostName(data)
	}
	return "", nil
}

// hostName reads the host_name entry of a server_name extension.
func hostName(data cryptobyte.String) (string, error) {
	var list cryptobyte.String
	if !data.ReadUint16LengthPrefixed(&list) || !data.Empty() || list.Empty() {
		return "", fmt.Errorf("%w: bad server_name extension", ErrMalformed)
	}
	for !list.Empty() {
		var typ uint8
		var name cryptobyte.String
		if !list.ReadUint8(&typ) || !list.ReadUint16LengthPrefixed(&name) {
			return "", fmt.Errorf("%w: bad server_name entry", ErrMalformed)
		}
		if typ != nameTypeHost {
			continue
		}
		if len(name) == 0 {
			return "", fmt.Errorf("%w: empty server name", ErrMalformed)
		}
		for _, c := range name {
			// Host names are ASCII letters, digits, '-', '.'; anything
			// else cannot match a route and must not reach a log as is.
			if c <= ' ' || c >= 0x7f {
				return "", fmt.Errorf("%w: server name with byte %#x", ErrMalformed, c)
			}
		}
		return string(name), nil
	}
	return "", nil
}
