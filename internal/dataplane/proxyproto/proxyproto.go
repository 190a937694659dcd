// Package proxyproto reads the PROXY protocol header (versions 1 and 2, as
// HAProxy's specification defines them) a load balancer in front sends at
// the start of a connection to say whose connection it carries. It reads
// no more than the header needs but for what one read returned past it,
// which it hands back to be served; the caller bounds the time with the
// connection's read deadline. It also writes one (Header.Append), for
// backends that want to know whose connection Portico carries to them.
package proxyproto

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strconv"
	"strings"
)

// Header is what a PROXY header says.
type Header struct {
	Version int
	// Local is set when the header names no client: a v2 LOCAL command
	// (the balancer's own health check), a v1 UNKNOWN line, or a family
	// without an IP address. The connection's peer is then its client.
	Local bool
	// Source and Dest are the client's and the balancer's addresses
	// (zero when Local).
	Source, Dest netip.AddrPort
}

var (
	// ErrNoHeader: the connection does not start with a PROXY header.
	ErrNoHeader = errors.New("no PROXY protocol header")
	// ErrMalformed: it starts as one but is not a valid header.
	ErrMalformed = errors.New("malformed PROXY protocol header")
)

const (
	v1Prefix = "PROXY "
	// v1MaxLen is the longest v1 line, CRLF included.
	v1MaxLen = 107
	v2Sig    = "\r\n\r\n\x00\r\nQUIT\n"
	// v2Fixed is the length of v2's fixed part: signature, version and
	// command, family and protocol, length.
	v2Fixed = 16
	// v2MaxAddr is the largest address block a v2 header has (two Unix
	// paths of 108 bytes); TLVs after it are read and dropped.
	v2MaxAddr = 216
)

// Read reads a PROXY header from r. rest is what was read past it, which
// belongs to the connection's first bytes. When r does not start with a
// header, the error is ErrNoHeader and rest holds every byte read.
func Read(r io.Reader) (h Header, rest []byte, err error) {
	buf := make([]byte, 0, 256)
	// Read until the first bytes tell a v1 line, a v2 header, or neither.
	for {
		n := len(buf)
		v1, v2 := isPrefix(buf, v1Prefix), isPrefix(buf, v2Sig)
		switch {
		case !v1 && !v2:
			return h, buf, ErrNoHeader
		case v1 && n >= len(v1Prefix):
			return readV1(r, buf)
		case v2 && n >= len(v2Sig):
			return readV2(r, buf)
		}
		if buf, err = readMore(r, buf); err != nil {
			return h, buf, err
		}
	}
}

// isPrefix reports whether b and the start of sig agree as far as both go.
func isPrefix(b []byte, sig string) bool {
	n := min(len(b), len(sig))
	return string(b[:n]) == sig[:n]
}

// readMore appends one read's bytes to buf; io.ErrUnexpectedEOF when the
// connection ends first.
func readMore(r io.Reader, buf []byte) ([]byte, error) {
	if len(buf) == cap(buf) {
		buf = append(buf, 0)[:len(buf)]
	}
	n, err := r.Read(buf[len(buf):cap(buf)])
	buf = buf[:len(buf)+n]
	if n > 0 {
		return buf, nil
	}
	if err == nil || errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF
	}
	return buf, fmt.Errorf("read PROXY protocol header: %w", err)
}

func readV1(r io.Reader, buf []byte) (Header, []byte, error) {
	var err error
	for {
		if i := bytes.Index(buf, []byte("\r\n")); i >= 0 {
			if i+2 > v1MaxLen {
				break
			}
			h, perr := parseV1(string(buf[len(v1Prefix):i]))
			return h, buf[i+2:], perr
		}
		if len(buf) >= v1MaxLen {
			break
		}
		if buf, err = readMore(r, buf); err != nil {
			return Header{}, nil, err
		}
	}
	return Header{}, nil, fmt.Errorf("%w: v1 line longer than %d bytes", ErrMalformed, v1MaxLen)
}

// parseV1 parses what follows "PROXY " on the line.
func parseV1(line string) (Header, error) {
	h := Header{Version: 1}
	f := strings.Split(line, " ")
	switch f[0] {
	case "UNKNOWN":
		// The receiver ignores the rest of the line.
		h.Local = true
		return h, nil
	case "TCP4", "TCP6":
	default:
		return h, fmt.Errorf("%w: v1 protocol %q", ErrMalformed, f[0])
	}
	if len(f) != 5 {
		return h, fmt.Errorf("%w: v1 line has %d fields, not 6", ErrMalformed, len(f)+1)
	}
	src, err1 := netip.ParseAddr(f[1])
	dst, err2 := netip.ParseAddr(f[2])
	sp, err3 := parsePort(f[3])
	dp, err4 := parsePort(f[4])
	if err := errors.Join(err1, err2, err3, err4); err != nil {
		return h, fmt.Errorf("%w: v1 addresses: %v", ErrMalformed, err)
	}
	want4 := f[0] == "TCP4"
	if src.Is4() != want4 || dst.Is4() != want4 || src.Zone() != "" || dst.Zone() != "" {
		return h, fmt.Errorf("%w: v1 addresses are not of family %s", ErrMalformed, f[0])
	}
	h.Source, h.Dest = netip.AddrPortFrom(src, sp), netip.AddrPortFrom(dst, dp)
	return h, nil
}

// parsePort parses a decimal port as v1 writes it: digits only, no
// leading zero.
func parsePort(s string) (uint16, error) {
	if s == "" || (len(s) > 1 && s[0] == '0') || strings.TrimLeft(s, "0123456789") != "" {
		return 0, fmt.Errorf("port %q", s)
	}
	p, err := strconv.ParseUint(s, 10, 16)
	if err != nil {
		return 0, fmt.Errorf("port %q", s)
	}
	return uint16(p), nil
}

func readV2(r io.Reader, buf []byte) (Header, []byte, error) {
	h := Header{Version: 2}
	var err error
	for len(buf) < v2Fixed {
		if buf, err = readMore(r, buf); err != nil {
			return h, nil, err
		}
	}
	verCmd, famProto := buf[12], buf[13]
	length := int(binary.BigEndian.Uint16(buf[14:16]))
	if verCmd>>4 != 2 {
		return h, nil, fmt.Errorf("%w: v2 version %d", ErrMalformed, verCmd>>4)
	}
	local := false
	switch verCmd & 0xf {
	case 0: // LOCAL
		local = true
	case 1: // PROXY
	default:
		return h, nil, fmt.Errorf("%w: v2 command %d", ErrMalformed, verCmd&0xf)
	}
	var addrLen int
	switch famProto >> 4 {
	case 0: // AF_UNSPEC
		local = true
	case 1: // AF_INET
		addrLen = 12
	case 2: // AF_INET6
		addrLen = 36
	case 3: // AF_UNIX: no IP address to use
		addrLen, local = v2MaxAddr, true
	default:
		return h, nil, fmt.Errorf("%w: v2 address family %d", ErrMalformed, famProto>>4)
	}
	if proto := famProto & 0xf; proto > 2 {
		return h, nil, fmt.Errorf("%w: v2 transport protocol %d", ErrMalformed, proto)
	}
	if !local && length < addrLen {
		return h, nil, fmt.Errorf("%w: v2 length %d is short of its %d address bytes", ErrMalformed, length, addrLen)
	}
	// The address block, and what the reads gave past it.
	need := v2Fixed + min(addrLen, length)
	for len(buf) < need {
		if buf, err = readMore(r, buf); err != nil {
			return h, nil, err
		}
	}
	if local {
		h.Local = true
	} else {
		a := buf[v2Fixed:]
		if addrLen == 12 {
			h.Source = netip.AddrPortFrom(netip.AddrFrom4([4]byte(a[0:4])), binary.BigEndian.Uint16(a[8:10]))
			h.Dest = netip.AddrPortFrom(netip.AddrFrom4([4]byte(a[4:8])), binary.BigEndian.Uint16(a[10:12]))
		} else {
			h.Source = netip.AddrPortFrom(netip.AddrFrom16([16]byte(a[0:16])), binary.BigEndian.Uint16(a[32:34]))
			h.Dest = netip.AddrPortFrom(netip.AddrFrom16([16]byte(a[16:32])), binary.BigEndian.Uint16(a[34:36]))
		}
	}
	// TLVs (and a Unix or unknown block) are not used: drop them without
	// keeping them, whatever their length (at most 64 KiB by the format).
	end := v2Fixed + length
	if len(buf) >= end {
		return h, buf[end:], nil
	}
	skip := int64(end - len(buf))
	if n, err := io.CopyN(io.Discard, r, skip); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return h, nil, fmt.Errorf("read PROXY protocol v2 TLVs (%d of %d bytes): %w", n, skip, err)
	}
	return h, nil, nil
}
