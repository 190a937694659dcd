package proxy

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"portico.dev/portico/internal/dataplane/h1"
)

// BenchmarkForwardOnly is BenchmarkForward with a client and a backend that
// allocate nothing per request: each speaks HTTP/1.1 over its own kept-alive
// loopback connections from fixed bytes, so allocs/op and B/op are
// Portico's alone (its server, handler, ReverseProxy and transport).
func BenchmarkForwardOnly(b *testing.B) {
	benchmarkForwardOnly(b, DefaultOptions())
}

// BenchmarkForwardOnlyAccessLog is BenchmarkForwardOnly with the access log
// on, JSON lines into a discarding writer.
func BenchmarkForwardOnlyAccessLog(b *testing.B) {
	opts := DefaultOptions()
	opts.AccessLog = discardAccessLog()
	benchmarkForwardOnly(b, opts)
}

func benchmarkForwardOnly(b *testing.B, opts Options) {
	backend, accepted := rawBackend(b)
	rt := New(opts, zap.NewNop())
	b.Cleanup(func() { _ = rt.Close(b.Context()) })
	port := freePort(b)
	if err := rt.Apply(httpPortConfig(b, port, "svc", backend)); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		// Connections Portico opened to the backend: as many as requests
		// in flight when its pool keeps them, more when it closes some.
		b.ReportMetric(float64(accepted()), "backend-conns")
	})
	rawLoad(b, fmt.Sprintf("127.0.0.1:%d", port))
}

// BenchmarkServerFloor is the same load against net/http's server alone,
// whose handler answers what the raw backend does: no proxying, no
// backend. What it costs per request is the part of BenchmarkForwardOnly
// that belongs to the server Portico is built on.
func BenchmarkServerFloor(b *testing.B) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(floorHandler)}
	go srv.Serve(ln) //nolint:errcheck // ends with Close
	b.Cleanup(func() { srv.Close() })
	rawLoad(b, ln.Addr().String())
}

// BenchmarkServerFloorPortico is BenchmarkServerFloor against Portico's
// own HTTP/1 server (package h1).
func BenchmarkServerFloorPortico(b *testing.B) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := &h1.Server{ReadHeaderTimeout: 5 * time.Second, IdleTimeout: time.Minute, Handler: http.HandlerFunc(floorHandler), Log: zap.NewNop()}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go srv.ServeConn(c)
		}
	}()
	b.Cleanup(func() {
		ln.Close()
		srv.Close()
	})
	rawLoad(b, ln.Addr().String())
}

// floorHandler answers what the raw backend does.
func floorHandler(w http.ResponseWriter, _ *http.Request) {
	w.Header()["Content-Type"] = []string{"text/plain"}
	w.Header()["Content-Length"] = []string{"7"}
	io.WriteString(w, "backend")
}

// rawLoad sends GETs to addr from fixed bytes over 16 kept-alive
// connections (as the side-by-side harness's kept-alive runs), and reports
// the process's CPU time per request besides allocations.
func rawLoad(b *testing.B, addr string) {
	rawLoadOf(b, addr, []byte("GET / HTTP/1.1\r\nHost: app.example.com\r\nUser-Agent: bench\r\nAccept: */*\r\n\r\n"))
}

// rawLoadOf is rawLoad sending req.
func rawLoadOf(b *testing.B, addr string, req []byte) {
	b.ReportAllocs()
	b.SetParallelism(max(16/runtime.GOMAXPROCS(0), 1))
	start := processCPU(b)
	defer func() {
		// The CPU time of the whole process (client and backend included,
		// which do little) per request: unlike ns/op, it does not count
		// the time other processes hold the cores.
		b.ReportMetric(float64(processCPU(b)-start)/float64(b.N), "cpu-ns/op")
	}()
	b.RunParallel(func(pb *testing.PB) {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			b.Error(err)
			return
		}
		defer c.Close()
		br := bufio.NewReader(c)
		for pb.Next() {
			if _, err := c.Write(req); err != nil {
				b.Error(err)
				return
			}
			status, err := readRawResponse(br)
			if err != nil {
				b.Error(err)
				return
			}
			if status != 200 {
				b.Errorf("status %d", status)
				return
			}
		}
	})
}

// processCPU is the user and system CPU time the process has used.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// readRawResponse reads one response with a Content-Length body from br
// and returns its status, allocating nothing.
func readRawResponse(br *bufio.Reader) (int, error) {
	status, length := 0, -1
	for first := true; ; first = false {
		line, err := br.ReadSlice('\n')
		if err != nil {
			return 0, err
		}
		line = bytes.TrimRight(line, "\r\n")
		if first {
			// HTTP/1.1 200 OK
			if len(line) < 12 {
				return 0, fmt.Errorf("bad status line %q", line)
			}
			status = int(line[9]-'0')*100 + int(line[10]-'0')*10 + int(line[11]-'0')
			continue
		}
		if len(line) == 0 {
			break
		}
		const cl = "content-length:"
		if len(line) > len(cl) && bytes.EqualFold(line[:len(cl)], []byte(cl)) {
			length = 0
			for _, c := range bytes.TrimSpace(line[len(cl):]) {
				length = length*10 + int(c-'0')
			}
		}
	}
	if length < 0 {
		return 0, fmt.Errorf("status %d without Content-Length", status)
	}
	if _, err := br.Discard(length); err != nil {
		return 0, err
	}
	return status, nil
}

// rawBackend answers every request on a connection with the same 200 and a
// 7-byte body, from fixed bytes. It reads requests without bodies only.
// accepted tells how many connections it has accepted so far.
func rawBackend(t testing.TB) (addr string, accepted func() int) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	const body = "backend"
	resp := []byte("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					for {
						line, err := br.ReadSlice('\n')
						if err != nil {
							return
						}
						if len(line) <= 2 { // the blank line ending the headers
							break
						}
					}
					if _, err := c.Write(resp); err != nil {
						return
					}
				}
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String(), func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(conns)
	}
}

// discardAccessLog is an access log that encodes JSON lines and drops them.
func discardAccessLog() *zap.Logger {
	return zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), zapcore.AddSync(io.Discard), zapcore.InfoLevel))
}
