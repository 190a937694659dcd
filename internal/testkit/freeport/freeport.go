// Package freeport finds loopback ports for tests to give a server they
// start by number. A port found free by listening on port 0 comes from the
// kernel's ephemeral range, which every outgoing connection of every test
// running beside draws from too: by the time the server binds it, another
// connection may hold it. These ports come from below that range.
package freeport

import (
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
)

// Port is a port of 127.0.0.1 that was free a moment ago, below the
// ephemeral range when the range leaves room for it.
func Port(t testing.TB) int {
	t.Helper()
	low := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil {
				low = n
			}
		}
	}
	if low > 20000 {
		for range 100 {
			p := 20000 + rand.IntN(low-20000)
			if free(p) {
				return p
			}
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// Addr is Port as "127.0.0.1:port", and the port.
func Addr(t testing.TB) (string, int) {
	t.Helper()
	p := Port(t)
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(p)), p
}

func free(p int) bool {
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
	if err != nil {
		return false
	}
	ln.Close()
	return true
}
