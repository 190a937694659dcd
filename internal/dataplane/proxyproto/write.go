package proxyproto

import (
	"encoding/binary"
	"net/netip"
	"strconv"
)

// Append appends h as a PROXY header of h.Version (1, else 2) to b: what
// Portico sends a backend ahead of a client's bytes. A v2 header has no
// TLV. A header with Local set, or whose addresses are not both IP ones,
// names no client: v1 "UNKNOWN", v2 the PROXY command with an unspecified
// family, so the backend takes the connection's own peer. Addresses of
// two families are both written as IPv6 (an IPv4 one mapped), zones
// dropped, as the format has no room for them.
func (h Header) Append(b []byte) []byte {
	src, dst, ok := h.addrs()
	if h.Version == 1 {
		if !ok {
			return append(b, "PROXY UNKNOWN\r\n"...)
		}
		b = append(b, v1Prefix...)
		if src.Addr().Is4() {
			b = append(b, "TCP4 "...)
		} else {
			b = append(b, "TCP6 "...)
		}
		b = src.Addr().AppendTo(b)
		b = append(b, ' ')
		b = dst.Addr().AppendTo(b)
		b = append(b, ' ')
		b = strconv.AppendUint(b, uint64(src.Port()), 10)
		b = append(b, ' ')
		b = strconv.AppendUint(b, uint64(dst.Port()), 10)
		return append(b, "\r\n"...)
	}
	b = append(b, v2Sig...)
	b = append(b, 0x21) // version 2, PROXY
	switch {
	case !ok:
		return append(b, 0x00, 0, 0) // AF_UNSPEC, no address block
	case src.Addr().Is4():
		b = append(b, 0x11, 0, 12) // AF_INET, STREAM
		a4, d4 := src.Addr().As4(), dst.Addr().As4()
		b = append(append(b, a4[:]...), d4[:]...)
	default:
		b = append(b, 0x21, 0, 36) // AF_INET6, STREAM
		a16, d16 := src.Addr().As16(), dst.Addr().As16()
		b = append(append(b, a16[:]...), d16[:]...)
	}
	b = binary.BigEndian.AppendUint16(b, src.Port())
	return binary.BigEndian.AppendUint16(b, dst.Port())
}

// addrs are h's addresses as a header writes them: of one family, IPv4
// when both are, without zones; false when h names no client.
func (h Header) addrs() (src, dst netip.AddrPort, ok bool) {
	if h.Local || !h.Source.Addr().IsValid() || !h.Dest.Addr().IsValid() {
		return src, dst, false
	}
	s, d := h.Source.Addr().Unmap().WithZone(""), h.Dest.Addr().Unmap().WithZone("")
	if s.Is4() != d.Is4() {
		s, d = netip.AddrFrom16(s.As16()), netip.AddrFrom16(d.As16())
	}
	return netip.AddrPortFrom(s, h.Source.Port()), netip.AddrPortFrom(d, h.Dest.Port()), true
}
