package sockio

import (
	"net"
	"os"
	"os/exec"
	"runtime"
	"sync/atomic"
	"testing"
	"time"
)

// TestKeeperPreemptsLongComputation: with one processor, a goroutine that
// the network woke (through a Conn, which makes no system call the
// runtime sees) and then computes without yielding must still be
// preempted, so that a goroutine waiting for the processor runs. The
// peer is another process, so that nothing in this one enters a system
// call before the computation starts: the runtime's monitor is asleep
// then, and only the Keeper's timer wakes it. Without the Keeper the
// computation runs to its bound of 5 s.
func TestKeeperPreemptsLongComputation(t *testing.T) {
	if os.Getenv("SOCKIO_PEER") != "" {
		t.Skip("the peer process runs TestKeeperPeer")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	peer := exec.Command(os.Args[0], "-test.run=^TestKeeperPeer$")
	peer.Env = append(os.Environ(), "SOCKIO_PEER="+ln.Addr().String())
	if err := peer.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { peer.Process.Kill(); peer.Wait() }()
	c, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	conn := Wrap(c)
	defer conn.Close()

	k := NewKeeper()
	defer k.Stop()
	k.Opened()
	defer k.Closed()

	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	yielded := make(chan bool, 1)
	go func() {
		// Parked in the poller until the peer writes, which it does
		// once this process went quiet.
		if _, err := conn.Read(make([]byte, 1)); err != nil {
			yielded <- false
			return
		}
		var other atomic.Bool
		go other.Store(true) // runs only if the loop below is preempted
		start := time.Now()
		for !other.Load() && time.Since(start) < 5*time.Second {
		}
		yielded <- other.Load()
	}()
	if !<-yielded {
		t.Fatal("the computation was never preempted: the goroutine waiting for the processor ran only after it")
	}
}

// TestKeeperPeer is the peer process of TestKeeperPreemptsLongComputation.
func TestKeeperPeer(t *testing.T) {
	addr := os.Getenv("SOCKIO_PEER")
	if addr == "" {
		t.Skip("run by TestKeeperPreemptsLongComputation")
	}
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	c.Write([]byte("x"))
	time.Sleep(10 * time.Second) // killed before
}
