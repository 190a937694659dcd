package main

import (
	"fmt"
	"net/netip"
	"strings"
)

// maxPool bounds how many addresses a CIDR range may expand to.
const maxPool = 4096

// parseAddressPool reads "--gateway-address-pool": addresses and CIDR
// ranges, comma-separated, expanded in order without duplicates. A range's
// network and broadcast addresses (IPv4) are left out.
func parseAddressPool(s string) ([]string, error) {
	var out []string
	seen := map[netip.Addr]bool{}
	add := func(a netip.Addr) error {
		if !seen[a] {
			if len(out) == maxPool {
				return fmt.Errorf("--gateway-address-pool: more than %d addresses", maxPool)
			}
			seen[a] = true
			out = append(out, a.String())
		}
		return nil
	}
	for item := range strings.SplitSeq(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		if !strings.Contains(item, "/") {
			a, err := netip.ParseAddr(item)
			if err != nil {
				return nil, fmt.Errorf("--gateway-address-pool: %w", err)
			}
			if err := add(a); err != nil {
				return nil, err
			}
			continue
		}
		p, err := netip.ParsePrefix(item)
		if err != nil {
			return nil, fmt.Errorf("--gateway-address-pool: %w", err)
		}
		p = p.Masked()
		first, last := p.Addr(), netip.Addr{}
		if p.Addr().Is4() && p.Bits() <= 30 {
			first = first.Next() // skip the network address
		}
		for a := first; a.IsValid() && p.Contains(a); a = a.Next() {
			if p.Addr().Is4() && p.Bits() <= 30 && !p.Contains(a.Next()) {
				break // the broadcast address
			}
			if err := add(a); err != nil {
				return nil, err
			}
			last = a
		}
		if !last.IsValid() {
			return nil, fmt.Errorf("--gateway-address-pool: %s holds no usable address", item)
		}
	}
	return out, nil
}
