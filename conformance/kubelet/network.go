package kubelet

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
)

// Network is a Linux bridge on the host with one network namespace per pod
// hanging off it by a veth pair, the way a node's pod network looks. The host
// holds the first address of Prefix on the bridge, so a process on the host
// (the gateway) reaches every pod; the pods have no default route, so they
// reach the host and each other and nothing else.
type Network struct {
	// Bridge is the bridge's link name.
	Bridge string
	// Prefix is the pod range; it must be a test-only range of this machine.
	Prefix netip.Prefix
	// NetnsPrefix starts the name of every pod namespace, so that a crashed
	// run's leftovers can be found by name.
	NetnsPrefix string

	mu   sync.Mutex
	used map[netip.Addr]bool
	// last is the address allocate handed out last; the next one starts
	// after it.
	last netip.Addr
}

// PodNetwork is one pod's namespace on a Network.
type PodNetwork struct {
	// Netns is the namespace's name for "ip netns".
	Netns string
	// Addr is the pod's address on the bridge.
	Addr netip.Addr

	hostLink string
	net      *Network
}

// HostAddr is the host's address on the bridge.
func (n *Network) HostAddr() netip.Addr {
	return n.Prefix.Masked().Addr().Next()
}

// SetUp creates the bridge and gives the host its address on it. A bridge of
// the same name left by a crashed run is removed first, with every namespace
// whose name starts with NetnsPrefix.
func (n *Network) SetUp(ctx context.Context) error {
	if len(n.Bridge) > 15 {
		return fmt.Errorf("bridge name %q is longer than 15 bytes", n.Bridge)
	}
	if !n.Prefix.Addr().Is4() || n.Prefix.Bits() > 30 {
		return fmt.Errorf("pod range %v: want an IPv4 prefix of /30 or wider", n.Prefix)
	}
	if err := n.TearDown(ctx); err != nil {
		return err
	}
	n.Prefix = n.Prefix.Masked()
	n.used = map[netip.Addr]bool{n.HostAddr(): true}
	steps := [][]string{
		{"link", "add", n.Bridge, "type", "bridge"},
		{"addr", "add", netip.PrefixFrom(n.HostAddr(), n.Prefix.Bits()).String(), "dev", n.Bridge},
		{"link", "set", n.Bridge, "up"},
	}
	for _, s := range steps {
		if err := ip(ctx, s...); err != nil {
			return fmt.Errorf("set up bridge: %w", err)
		}
	}
	return nil
}

// AddHostAddrs gives the host n more addresses on the bridge, from the top
// of the range down, and keeps them from pods. Portico takes them as its
// pool of Gateway addresses.
func (n *Network) AddHostAddrs(ctx context.Context, count int) ([]netip.Addr, error) {
	var out []netip.Addr
	for a := lastAddr(n.Prefix).Prev(); len(out) < count && n.Prefix.Contains(a) && a != n.HostAddr(); a = a.Prev() {
		if n.used[a] {
			continue
		}
		if err := ip(ctx, "addr", "add", netip.PrefixFrom(a, n.Prefix.Bits()).String(), "dev", n.Bridge); err != nil {
			return nil, fmt.Errorf("add host address %v: %w", a, err)
		}
		n.used[a] = true
		out = append(out, a)
	}
	if len(out) < count {
		return nil, fmt.Errorf("pod range %v has no %d free addresses for the host", n.Prefix, count)
	}
	return out, nil
}

// TearDown removes every pod namespace of this Network (by name prefix) and
// the bridge. It is what a clean-up after a crash runs too, so it does not
// need the state SetUp built.
func (n *Network) TearDown(ctx context.Context) error {
	var errs []error
	names, err := netnsNames()
	if err != nil {
		errs = append(errs, err)
	}
	for _, name := range names {
		if n.NetnsPrefix != "" && strings.HasPrefix(name, n.NetnsPrefix) {
			errs = append(errs, ip(ctx, "netns", "del", name))
		}
	}
	// Deleting a namespace deletes its end of each veth pair and so the
	// host's end too; what remains is the bridge.
	if err := ip(ctx, "link", "del", n.Bridge); err != nil && !isNoDevice(err) {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// netnsNames lists the namespaces "ip netns" knows by name.
func netnsNames() ([]string, error) {
	entries, err := os.ReadDir("/var/run/netns")
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list network namespaces: %w", err)
	}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names, nil
}

var unsafeLinkChars = regexp.MustCompile(`[^a-z0-9]+`)

// AddPod creates the namespace for the pod with the given UID, with an
// address of its own and loopback up. The UID names the namespace and the
// host's end of the veth pair, so they are unique and recognisable.
func (n *Network) AddPod(ctx context.Context, uid string) (_ *PodNetwork, err error) {
	id := unsafeLinkChars.ReplaceAllString(strings.ToLower(uid), "")
	if len(id) < 8 {
		return nil, fmt.Errorf("pod uid %q is too short to name a link", uid)
	}
	addr, err := n.allocate()
	if err != nil {
		return nil, err
	}
	p := &PodNetwork{
		Netns: n.NetnsPrefix + id,
		Addr:  addr,
		// "vp" + 12 hex digits stays within the 15 bytes of a link name.
		hostLink: "vp" + id[:12],
		net:      n,
	}
	defer func() {
		if err != nil {
			_ = p.Delete(context.WithoutCancel(ctx))
		}
	}()
	steps := [][]string{
		{"netns", "add", p.Netns},
		{"link", "add", p.hostLink, "type", "veth", "peer", "name", "eth0", "netns", p.Netns},
		{"link", "set", p.hostLink, "master", n.Bridge},
		{"link", "set", p.hostLink, "up"},
		{"-n", p.Netns, "addr", "add", netip.PrefixFrom(addr, n.Prefix.Bits()).String(), "dev", "eth0"},
		{"-n", p.Netns, "link", "set", "eth0", "up"},
		{"-n", p.Netns, "link", "set", "lo", "up"},
		// The host may still have a neighbour (ARP) entry for the address
		// naming the MAC of a pod deleted before (allocate takes that long
		// to come back to an address, but not forever): until it went
		// stale, the host's packets to this pod would go to that MAC and
		// nowhere.
		{"neigh", "flush", "to", addr.String(), "dev", n.Bridge},
	}
	for _, s := range steps {
		if err := ip(ctx, s...); err != nil {
			return nil, fmt.Errorf("pod network: %w", err)
		}
	}
	return p, nil
}

// allocate hands out the next free address of the range after the one it
// handed out last, wrapping around at the end: an address freed by a pod
// is the last to be handed out again, so that the neighbour entries and
// the connections that named its old pod have long gone by then.
func (n *Network) allocate() (netip.Addr, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	first, end := n.Prefix.Addr().Next(), lastAddr(n.Prefix)
	start := first
	if n.last.IsValid() && n.Prefix.Contains(n.last) {
		start = n.last.Next()
	}
	a := start
	for range uint64(1) << (32 - n.Prefix.Bits()) {
		if !a.Less(end) || a.Less(first) {
			a = first
		}
		if !n.used[a] {
			n.used[a] = true
			n.last = a
			return a, nil
		}
		a = a.Next()
	}
	return netip.Addr{}, fmt.Errorf("pod range %v is full", n.Prefix)
}

func (n *Network) release(a netip.Addr) {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.used, a)
}

// lastAddr is the broadcast address of an IPv4 prefix.
func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().As4()
	host := 32 - p.Bits()
	for i := 3; i >= 0 && host > 0; i-- {
		bits := min(host, 8)
		b[i] |= byte(1<<bits - 1)
		host -= bits
	}
	return netip.AddrFrom4(b)
}

// Delete removes the namespace and the veth pair and frees the address.
// Processes must have left the namespace first, or it stays alive (without a
// name) until they exit.
func (p *PodNetwork) Delete(ctx context.Context) error {
	var errs []error
	if err := ip(ctx, "link", "del", p.hostLink); err != nil && !isNoDevice(err) {
		errs = append(errs, err)
	}
	if err := ip(ctx, "netns", "del", p.Netns); err != nil && !strings.Contains(err.Error(), "No such file") {
		errs = append(errs, err)
	}
	p.net.release(p.Addr)
	return errors.Join(errs...)
}

// Command runs name with args inside the pod's namespace.
func (p *PodNetwork) Command(name string, args ...string) *exec.Cmd {
	return exec.Command("ip", append([]string{"netns", "exec", p.Netns, name}, args...)...)
}

func ip(ctx context.Context, args ...string) error {
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "ip", args...)
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, bytes.TrimSpace(stderr.Bytes()))
	}
	return nil
}

func isNoDevice(err error) bool {
	return strings.Contains(err.Error(), "Cannot find device")
}
