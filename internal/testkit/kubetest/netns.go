package kubetest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// Backends of cluster-mode tests need addresses the API server accepts in an
// EndpointSlice, which rules out loopback. Each Netns gets a /30 out of
// 198.18.0.0/16 (part of the benchmarking range, RFC 2544): the address
// exists only on the two ends of the Netns's veth pair, so traffic to it never
// leaves this machine.
var netnsPool = netip.MustParsePrefix("198.18.0.0/16")

// netnsLock serialises the choice of a free /30 between test processes.
const netnsLock = "/run/portico-kubetest-netns.lock"

// Netns is a network namespace joined to the host by a veth pair, like the
// network of a pod: Addr is the namespace's end, HostAddr the host's. The two
// reach each other and nothing else: the namespace has no default route, so
// a backend in it cannot send traffic anywhere but to the host's end.
type Netns struct {
	// Name is the namespace's name for "ip netns".
	Name string
	// Addr is the address inside the namespace, where backends listen.
	Addr netip.Addr
	// HostAddr is the host's end of the veth pair.
	HostAddr netip.Addr

	hostLink string
}

// NeedNetns skips the test unless network namespaces can be made here: root
// and the ip command (hack/install-deps.sh installs it).
func NeedNetns(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("kubetest: network namespaces need root; run the tests as root (CI does)")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Fatalf("kubetest: the ip command (iproute2) is missing; run hack/install-deps.sh")
	}
}

// NewNetns creates a network namespace for the test and deletes it when the
// test ends. name only makes the namespace recognisable in "ip netns list".
// The test is skipped when not run as root.
func NewNetns(t testing.TB, name string) *Netns {
	t.Helper()
	NeedNetns(t)
	n, err := CreateNetns(context.Background(), name)
	if err != nil {
		t.Fatalf("kubetest: %v", err)
	}
	t.Cleanup(func() {
		if err := n.Delete(); err != nil {
			t.Errorf("kubetest: %v", err)
		}
	})
	return n
}

var unsafeNameChars = regexp.MustCompile(`[^a-zA-Z0-9-]+`)

// CreateNetns creates a network namespace outside of a test; the caller must
// call Delete.
func CreateNetns(ctx context.Context, name string) (_ *Netns, err error) {
	suffix := make([]byte, 4)
	if _, err := rand.Read(suffix); err != nil {
		return nil, fmt.Errorf("netns name: %w", err)
	}
	id := hex.EncodeToString(suffix)
	name = strings.Trim(unsafeNameChars.ReplaceAllString(name, "-"), "-")
	if len(name) > 40 {
		name = name[:40]
	}
	n := &Netns{
		Name: "portico-" + name + "-" + id,
		// Interface names are at most 15 bytes.
		hostLink: "pt" + id + "h",
	}
	nsLink := "pt" + id + "n"

	lock, err := os.OpenFile(netnsLock, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("netns lock: %w", err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return nil, fmt.Errorf("netns lock: %w", err)
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)

	subnet, err := freeSubnet()
	if err != nil {
		return nil, err
	}
	n.HostAddr = subnet.Addr().Next()
	n.Addr = n.HostAddr.Next()

	if err := ip(ctx, "netns", "add", n.Name); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = n.Delete()
		}
	}()
	bits := "/" + fmt.Sprint(subnet.Bits())
	steps := [][]string{
		{"link", "add", n.hostLink, "type", "veth", "peer", "name", nsLink},
		{"link", "set", nsLink, "netns", n.Name},
		{"addr", "add", n.HostAddr.String() + bits, "dev", n.hostLink},
		{"link", "set", n.hostLink, "up"},
		{"-n", n.Name, "addr", "add", n.Addr.String() + bits, "dev", nsLink},
		{"-n", n.Name, "link", "set", nsLink, "up"},
		{"-n", n.Name, "link", "set", "lo", "up"},
	}
	for _, s := range steps {
		if err := ip(ctx, s...); err != nil {
			return nil, err
		}
	}
	return n, nil
}

// freeSubnet picks a random /30 of the pool that no interface on the host
// uses. Random rather than first-free keeps two processes that race past
// the lock (a crashed holder, another machine-wide user) apart.
func freeSubnet() (netip.Prefix, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("host addresses: %w", err)
	}
	used := map[netip.Prefix]bool{}
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok {
			if addr, ok := netip.AddrFromSlice(ipn.IP); ok {
				p, _ := addr.Unmap().Prefix(30)
				used[p] = true
			}
		}
	}
	base := netnsPool.Addr().As4()
	start := binary.BigEndian.Uint32(base[:])
	count := uint32(1) << (32 - netnsPool.Bits() - 2)
	var r [4]byte
	if _, err := rand.Read(r[:]); err != nil {
		return netip.Prefix{}, fmt.Errorf("subnet: %w", err)
	}
	first := binary.BigEndian.Uint32(r[:]) % count
	for i := range count {
		var a [4]byte
		binary.BigEndian.PutUint32(a[:], start+((first+i)%count)*4)
		p := netip.PrefixFrom(netip.AddrFrom4(a), 30)
		if !used[p] {
			return p, nil
		}
	}
	return netip.Prefix{}, fmt.Errorf("no free /30 left in %v", netnsPool)
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

// Delete removes the namespace and the veth pair. Sockets opened in the
// namespace keep it alive until they are closed, so close them first.
func (n *Netns) Delete() error {
	// Deleting one end of a veth pair deletes both at once, whereas a
	// namespace kept alive by a socket would keep its end.
	linkErr := ip(context.Background(), "link", "del", n.hostLink)
	if err := ip(context.Background(), "netns", "del", n.Name); err != nil {
		return err
	}
	if linkErr != nil && !strings.Contains(linkErr.Error(), "Cannot find device") {
		return linkErr
	}
	return nil
}

// Command returns a command that runs name with args inside the namespace.
func (n *Netns) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", n.Name, name}, args...)...)
}

// Listen opens a listener inside the namespace, for a server that runs in
// the test process: address is as for net.Listen, e.g. n.AddrPort(0) for any
// port on Addr. The socket stays in the namespace whichever thread later
// serves it, so the caller uses it like any listener.
func (n *Netns) Listen(network, address string) (net.Listener, error) {
	var l net.Listener
	err := n.do(func() error {
		var err error
		l, err = net.Listen(network, address)
		return err
	})
	if err != nil {
		if l != nil {
			l.Close()
		}
		return nil, fmt.Errorf("listen in netns %s: %w", n.Name, err)
	}
	return l, nil
}

// ListenPacket is Listen for a packet socket (UDP), bound inside the
// namespace.
func (n *Netns) ListenPacket(network, address string) (net.PacketConn, error) {
	var c net.PacketConn
	err := n.do(func() error {
		var err error
		c, err = net.ListenPacket(network, address)
		return err
	})
	if err != nil {
		if c != nil {
			c.Close()
		}
		return nil, fmt.Errorf("listen in netns %s: %w", n.Name, err)
	}
	return c, nil
}

// AddrPort returns "Addr:port", to listen on or dial.
func (n *Netns) AddrPort(port uint16) string {
	return netip.AddrPortFrom(n.Addr, port).String()
}

// do runs f on an OS thread that has entered the namespace. Sockets that f
// creates belong to the namespace for their whole life.
func (n *Netns) do(f func() error) error {
	target, err := os.Open("/var/run/netns/" + n.Name)
	if err != nil {
		return fmt.Errorf("open netns: %w", err)
	}
	defer target.Close()
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		self, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("open own netns: %w", err)
			return
		}
		defer self.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("enter netns: %w", err)
			return
		}
		ferr := f()
		if err := unix.Setns(int(self.Fd()), unix.CLONE_NEWNET); err != nil {
			// The thread stays locked, so the runtime discards it when this
			// goroutine ends rather than reuse it in the wrong namespace.
			errc <- fmt.Errorf("leave netns: %w", err)
			return
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}
