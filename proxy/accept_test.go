package proxy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"portico.dev/portico/config"
)

// acceptChildEnv makes the test binary run as the server of
// TestAcceptSurvivesRunningOutOfFiles.
const acceptChildEnv = "PORTICO_ACCEPT_CHILD"

// getOn sends one GET on c and reads its answer, within d; it returns the
// status code, or an error when the answer did not come.
func getOn(c net.Conn, br *bufio.Reader, d time.Duration) (int, error) {
	_ = c.SetDeadline(time.Now().Add(d))
	defer c.SetDeadline(time.Time{}) //nolint:errcheck // best effort
	if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: app.example.com\r\n\r\n"); err != nil {
		return 0, fmt.Errorf("write request: %w", err)
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return 0, fmt.Errorf("read answer: %w", err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

// TestAcceptSurvivesRunningOutOfFiles: a server process whose open files
// limit its clients exhaust keeps accepting: each failed accept (EMFILE)
// sheds the oldest idle keep-alive connections and is retried, so every
// new client is served, and once the clients are gone a new one is too.
// The server is this test binary run again with a low RLIMIT_NOFILE, so
// that the exhaustion is the kernel's.
func TestAcceptSurvivesRunningOutOfFiles(t *testing.T) {
	if os.Getenv(acceptChildEnv) != "" {
		acceptChild(t)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestAcceptSurvivesRunningOutOfFiles$", "-test.count=1")
	cmd.Env = append(os.Environ(), acceptChildEnv+"=1")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ended := false
	defer func() {
		if !ended {
			stdin.Close()
			_ = cmd.Wait()
		}
	}()
	lines := bufio.NewScanner(stdout)
	var addr string
	for lines.Scan() {
		if a, ok := strings.CutPrefix(lines.Text(), "ADDR "); ok {
			addr = a
			break
		}
	}
	if addr == "" {
		stdin.Close()
		_ = cmd.Wait()
		ended = true
		t.Fatalf("the server process gave no address; its output:\n%s", stderr.String())
	}
	go io.Copy(io.Discard, stdout) //nolint:errcheck // until the child exits

	// Twice the files the server has left: each connection kept open
	// holds one of them, so past about half of them accepts fail.
	type client struct {
		c  net.Conn
		br *bufio.Reader
	}
	var clients []client
	defer func() {
		for _, cl := range clients {
			cl.c.Close()
		}
	}()
	for i := range 2 * acceptChildSpare {
		c, err := net.DialTimeout("tcp", addr, 3*time.Second)
		if err != nil {
			t.Fatalf("client %d: %v", i, err)
		}
		br := bufio.NewReader(c)
		clients = append(clients, client{c, br})
		if _, err := getOn(c, br, 5*time.Second); err != nil {
			t.Fatalf("client %d was not served once the server ran out of files: %v", i, err)
		}
	}
	// The oldest clients' connections were closed to make room.
	shed := 0
	for _, cl := range clients {
		_ = cl.c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
		if _, err := cl.br.ReadByte(); errors.Is(err, io.EOF) {
			shed++
		}
	}
	if shed == 0 {
		t.Errorf("no idle connection was closed to serve %d clients with %d files to spare", len(clients), acceptChildSpare)
	}
	for _, cl := range clients {
		cl.c.Close()
	}
	clients = nil
	// Everyone gone: a new client is served.
	c, err := net.DialTimeout("tcp", addr, 3*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := getOn(c, bufio.NewReader(c), 5*time.Second); err != nil {
		t.Errorf("a client after the others left was not served: %v", err)
	}
	stdin.Close()
	err = cmd.Wait()
	ended = true
	if err != nil {
		t.Errorf("server process: %v", err)
	}
	if !strings.Contains(stderr.String(), "too many open files") {
		t.Errorf("the server process never ran out of files; its log:\n%s", stderr.String())
	}
	if t.Failed() {
		t.Logf("server log:\n%s", stderr.String())
	}
}

// acceptChildSpare is how many files the server process of
// TestAcceptSurvivesRunningOutOfFiles may open once its port is bound.
const acceptChildSpare = 24

// acceptChild is the server of TestAcceptSurvivesRunningOutOfFiles: one
// plain HTTP port, with no endpoints
// (each request is answered 503 without a backend connection), then a
// limit of open files acceptChildSpare above those open, its address on
// standard output, and serving until standard input closes.
func acceptChild(t *testing.T) {
	opts := DefaultOptions()
	opts.BindAddress = "127.0.0.1"
	opts.DrainTimeout = time.Second
	log := zap.New(zapcore.NewCore(zapcore.NewConsoleEncoder(zap.NewDevelopmentEncoderConfig()), zapcore.Lock(os.Stderr), zap.InfoLevel))
	rt := New(opts, log)
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		_ = rt.Close(ctx)
	}()
	p := freePort(t)
	cfg := httpPortConfig(t, p, "svc", "127.0.0.1:1")
	cfg.Endpoints = config.NewEndpointTable(nil)
	if err := rt.Apply(cfg); err != nil {
		t.Fatal(err)
	}
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("counting open files: %v", err)
	}
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	lim.Cur = uint64(len(fds) + acceptChildSpare)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	fmt.Printf("ADDR 127.0.0.1:%d\n", p)
	_, _ = io.Copy(io.Discard, os.Stdin)
}

// failingListener fails its accepts with EMFILE while failing is set; a
// connection that arrives meanwhile is closed.
type failingListener struct {
	net.Listener
	failing *atomic.Bool
}

func (l *failingListener) Accept() (net.Conn, error) {
	emfile := &net.OpError{Op: "accept", Net: "tcp", Addr: l.Addr(), Err: os.NewSyscallError("accept4", syscall.EMFILE)}
	if l.failing.Load() {
		return nil, emfile
	}
	c, err := l.Listener.Accept()
	if err == nil && l.failing.Load() {
		c.Close()
		return nil, emfile
	}
	return c, err
}

// TestReadyIsFalseWhileAPortCannotAccept: the runtime is not ready while
// a port's accepts have failed for longer than its threshold, and ready
// again once the port accepts, which it does without a restart.
func TestReadyIsFalseWhileAPortCannotAccept(t *testing.T) {
	rt := newRuntime(t)
	rt.acceptUnreadyAfter = 300 * time.Millisecond
	var failing atomic.Bool
	rt.listen = func(network, address string) (net.Listener, error) {
		ln, err := net.Listen(network, address)
		if err != nil {
			return nil, err
		}
		return &failingListener{Listener: ln, failing: &failing}, nil
	}
	backend := slowBackend(t, "b")
	p := freePort(t)
	if err := rt.Apply(httpPortConfig(t, p, "svc", backend)); err != nil {
		t.Fatal(err)
	}
	url := fmt.Sprintf("http://127.0.0.1:%d/", p)
	if code, _ := body(t, url); code != http.StatusOK {
		t.Fatalf("before the failures: %d", code)
	}
	if err := rt.Ready(); err != nil {
		t.Fatalf("ready before the failures: %v", err)
	}

	failing.Store(true)
	// The accept under way returns with this connection (closed): the
	// ones after it fail.
	if c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", p)); err == nil {
		c.Close()
	}
	if !waitFor(5*time.Second, func() bool {
		err := rt.Ready()
		return err != nil && strings.Contains(err.Error(), "too many open files") && strings.Contains(err.Error(), fmt.Sprint(p))
	}) {
		t.Fatalf("still ready while the port cannot accept: %v", rt.Ready())
	}

	failing.Store(false)
	// The retry that comes within a second takes this client.
	client := &http.Client{Timeout: 5 * time.Second}
	resp, err := client.Get(url)
	if err != nil {
		t.Fatalf("the port did not accept again: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("after the failures: %d", resp.StatusCode)
	}
	if err := rt.Ready(); err != nil {
		t.Errorf("not ready once the port accepts again: %v", err)
	}
}

// TestPerClientCapRefusesOnlyThatClient: a client address holding its
// share of a port's connections has its next one refused, while another
// address is served, and it is served again once it closed one.
func TestPerClientCapRefusesOnlyThatClient(t *testing.T) {
	const share = 3
	rt := relRuntime(t, func(o *Options) { o.MaxConnsPerClient = share })
	backend, _ := relBackend(t, func(w http.ResponseWriter, r *http.Request) {})
	addr := relHTTPPort(t, rt, backend)
	dialFrom := func(ip string) (net.Conn, *bufio.Reader) {
		t.Helper()
		d := net.Dialer{Timeout: 3 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
		c, err := d.Dial("tcp", addr)
		if err != nil {
			t.Skipf("dialing from %s: %v", ip, err)
		}
		t.Cleanup(func() { c.Close() })
		return c, bufio.NewReader(c)
	}
	var held []net.Conn
	for i := range share {
		c, br := dialFrom("127.0.0.1")
		if code, err := getOn(c, br, 5*time.Second); err != nil || code != http.StatusOK {
			t.Fatalf("connection %d within the share: %d, %v", i, code, err)
		}
		held = append(held, c)
	}
	c, br := dialFrom("127.0.0.1")
	if code, err := getOn(c, br, 5*time.Second); err == nil {
		t.Fatalf("connection past the share of 127.0.0.1 was served: %d", code)
	}
	other, obr := dialFrom("127.0.0.2")
	if code, err := getOn(other, obr, 5*time.Second); err != nil || code != http.StatusOK {
		t.Fatalf("127.0.0.2 was not served while 127.0.0.1 holds its share: %d, %v", code, err)
	}
	held[0].Close()
	// The server notices the close when its idle read ends: poll.
	var once sync.Once
	if !waitFor(5*time.Second, func() bool {
		c, br := dialFrom("127.0.0.1")
		code, err := getOn(c, br, time.Second)
		if err != nil {
			once.Do(func() { t.Logf("while 127.0.0.1's closed connection is released: %v", err) })
			c.Close()
			return false
		}
		return code == http.StatusOK
	}) {
		t.Error("127.0.0.1 not served again after closing a connection")
	}
}

// TestFileLimitWarning: a configuration whose ports' connection caps
// cannot fit in the open files limit is warned about, with the numbers of
// the rule; one that fits is not.
func TestFileLimitWarning(t *testing.T) {
	core, logs := observer.New(zapcore.WarnLevel)
	opts := DefaultOptions()
	opts.BindAddress = "127.0.0.1"
	opts.MaxConnsPerPort = 1000
	opts.FileLimit = 4100 // 2 × 1000 × 1 + 1024 fits; × 2 ports does not
	rt := New(opts, zap.New(core))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		_ = rt.Close(ctx)
	})
	backend := slowBackend(t, "b")
	cfg := httpPortConfig(t, freePort(t), "svc", backend)
	if err := rt.Apply(cfg); err != nil {
		t.Fatal(err)
	}
	if n := logs.FilterMessageSnippet("open files limit").Len(); n != 0 {
		t.Fatalf("warned about one port that fits: %v", logs.All())
	}
	two := *cfg
	second := *cfg.Ports[0]
	second.Number = int32(freePort(t))
	two.Ports = append([]*config.Port{&second}, cfg.Ports...)
	if err := rt.Apply(&two); err != nil {
		t.Fatal(err)
	}
	warned := logs.FilterMessageSnippet("open files limit").All()
	if len(warned) != 1 {
		t.Fatalf("warnings for two ports that do not fit: %v", logs.All())
	}
	f := warned[0].ContextMap()
	if f["files_needed"] != uint64(5024) || f["open_files_limit"] != uint64(4100) || f["ports"] != int64(2) || f["max_connections_per_port"] != int64(1000) {
		t.Errorf("warning fields: %v", f)
	}
}

// TestFileLimitFitsDefaultCaps: connection caps the operator did not set
// (FitConnCaps) are lowered to what fits in the open files limit, for as
// many ports as are bound, logged once at info and never warned about; a
// port then refuses a connection over its fitted cap on a real socket.
func TestFileLimitFitsDefaultCaps(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	opts := DefaultOptions()
	opts.BindAddress = "127.0.0.1"
	opts.FitConnCaps = true
	// (FileLimit - 1024) / 2 = 140 connections for one port, 70 each for
	// two; MaxConnsPerPort stays the default, 10000.
	opts.FileLimit = fileHeadroom + 2*140
	opts.MaxConnsPerClient = -1
	rt := New(opts, zap.New(core))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		_ = rt.Close(ctx)
	})
	backend := slowBackend(t, "b")
	p := freePort(t)
	cfg := httpPortConfig(t, p, "svc", backend)
	if err := rt.Apply(cfg); err != nil {
		t.Fatal(err)
	}
	if w := logs.FilterLevelExact(zapcore.WarnLevel).All(); len(w) != 0 {
		t.Fatalf("warned about caps nobody set: %v", w)
	}
	caps := logs.FilterMessage("connection caps").All()
	if len(caps) != 1 || caps[0].ContextMap()["max_connections_per_port"] != int64(140) || caps[0].ContextMap()["ports"] != int64(1) {
		t.Fatalf("connection caps lines %v, want one with 140 for 1 port", caps)
	}

	// The 141st connection is reset; the 140 before it are served.
	addr := fmt.Sprintf("127.0.0.1:%d", p)
	var open []net.Conn
	t.Cleanup(func() {
		for _, c := range open {
			c.Close()
		}
	})
	for i := range 140 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		open = append(open, c)
	}
	if code, err := getOn(open[139], bufio.NewReader(open[139]), 5*time.Second); err != nil || code != http.StatusOK {
		t.Fatalf("connection 140, under the fitted cap: %d %v", code, err)
	}
	extra, err := net.Dial("tcp", addr)
	if err == nil {
		if code, err := getOn(extra, bufio.NewReader(extra), 5*time.Second); err == nil {
			t.Errorf("connection 141, over the fitted cap, was answered %d", code)
		}
		extra.Close()
	}

	two := *cfg
	second := *cfg.Ports[0]
	second.Number = int32(freePort(t))
	two.Ports = append([]*config.Port{&second}, cfg.Ports...)
	if err := rt.Apply(&two); err != nil {
		t.Fatal(err)
	}
	caps = logs.FilterMessage("connection caps").All()
	if len(caps) != 2 || caps[1].ContextMap()["max_connections_per_port"] != int64(70) || caps[1].ContextMap()["ports"] != int64(2) {
		t.Fatalf("connection caps lines %v, want a second with 70 for 2 ports", caps)
	}
	if w := logs.FilterMessageSnippet("open files limit").All(); len(w) != 0 {
		t.Errorf("warned about caps nobody set: %v", w)
	}
	// The port bound first holds 140 connections, over its new cap: the
	// next is refused.
	late, err := net.Dial("tcp", addr)
	if err == nil {
		if code, err := getOn(late, bufio.NewReader(late), 5*time.Second); err == nil {
			t.Errorf("a connection over the lowered cap was answered %d", code)
		}
		late.Close()
	}
}

// TestFittedConnCap: the rule of fitted caps, with its bounds.
func TestFittedConnCap(t *testing.T) {
	for _, c := range []struct {
		limit       uint64
		ports, want int
		cap         int
	}{
		{1 << 20, 2, 10000, 10000},            // a large limit: the default stands
		{20000, 1, 10000, 9488},               // (20000 - 1024) / 2
		{20000, 2, 10000, 4744},               // (20000 - 1024) / 4
		{20000, 2, 1000, 1000},                // never above what was asked
		{1024, 1, 10000, minFittedConnCap},    // nothing fits: the floor
		{2000, 100, 10000, minFittedConnCap},  // too many ports: the floor
		{20000, 2, -1, 4744},                  // no cap asked: what fits
		{fileHeadroom + 2*30, 1, 10, 10},      // under the floor, as asked
		{fileHeadroom + 2*100, 1, 10000, 100}, // exactly what fits
		{fileHeadroom + 2*100 + 1, 1, 10000, 100},
	} {
		if got := fittedConnCap(c.limit, c.ports, c.want); got != c.cap {
			t.Errorf("fittedConnCap(%d, %d, %d) = %d, want %d", c.limit, c.ports, c.want, got, c.cap)
		}
	}
}
