// Package workers runs HTTP handlers on goroutines that outlive one
// request.
//
// x/net's HTTP/2 server starts a goroutine per stream. A goroutine starts
// with a small stack, and forwarding a request needs a deeper one: every
// stream grew its stack three or four times, each growth a copy, about 6%
// of the CPU of HTTP/2 requests under load. A worker's stack has grown
// once and stays grown while the worker serves stream after stream (the
// collector halves it when it finds it mostly unused, and it grows back
// once). The stream's goroutine waits for its worker; handing a request
// over and back costs two goroutine switches, far less than the copies.
package workers

import (
	"cmp"
	"fmt"
	"net/http"
	"runtime"
	"runtime/debug"
	"sync"
)

// Pool keeps idle workers. Its zero value keeps up to DefaultMaxIdle.
type Pool struct {
	mu      sync.Mutex
	idle    []*worker
	maxIdle int
	closed  bool
}

// DefaultMaxIdle is how many idle workers a zero Pool keeps: enough for
// the streams in flight under heavy load on a few cores.
const DefaultMaxIdle = 256

// New returns a pool that keeps at most maxIdle idle workers; more are
// started when more requests run at once, and end when idle beyond that.
func New(maxIdle int) *Pool {
	return &Pool{maxIdle: maxIdle}
}

// worker is one goroutine and what it serves next: a task (Go), or a
// handler whose caller waits (Serve).
type worker struct {
	pool  *Pool
	start chan struct{}
	done  chan any // what the handler panicked with, or nil
	task  Task
	h     http.HandlerFunc
	w     http.ResponseWriter
	r     *http.Request
}

// Task is what Go runs. A panic in Run is Run's to recover: on a worker
// nobody else could. A runtime.Goexit in Run ends its worker.
type Task interface{ Run() }

// Go runs t on a worker and returns at once; the worker goes back to the
// pool when t returns. A server that runs each stream's handler without a
// goroutine of the stream's own (package h2) hands the stream over this
// way.
func (p *Pool) Go(t Task) {
	wk := p.get()
	wk.task = t
	wk.start <- struct{}{}
}

// Serve runs h(w, r) on a worker and returns when it has returned. A panic
// of h is raised again on the caller's goroutine, where the server that
// called Serve recovers it (http.ErrAbortHandler aborts the stream).
func (p *Pool) Serve(h http.HandlerFunc, w http.ResponseWriter, r *http.Request) {
	wk := p.get()
	wk.h, wk.w, wk.r = h, w, r
	wk.start <- struct{}{}
	v := <-wk.done
	if v == (goexited{}) {
		// The worker is gone; so is the caller, as if h had run on it:
		// the server that called Serve treats that as it always did.
		runtime.Goexit()
	}
	p.put(wk)
	if v != nil {
		panic(v)
	}
}

// goexited is what a worker reports when h called runtime.Goexit (through
// t.FailNow, say), which ends the worker with no panic to recover.
type goexited struct{}

func (p *Pool) get() *worker {
	p.mu.Lock()
	if n := len(p.idle); n > 0 {
		wk := p.idle[n-1]
		p.idle[n-1] = nil
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		return wk
	}
	p.mu.Unlock()
	wk := &worker{pool: p, start: make(chan struct{}), done: make(chan any, 1)}
	go wk.run()
	return wk
}

// put keeps wk idle, or ends it when the pool is full or closed.
func (p *Pool) put(wk *worker) {
	p.mu.Lock()
	if p.closed || len(p.idle) >= cmp.Or(p.maxIdle, DefaultMaxIdle) {
		p.mu.Unlock()
		close(wk.start)
		return
	}
	p.idle = append(p.idle, wk)
	p.mu.Unlock()
}

// Close ends the idle workers and those that become idle afterwards.
func (p *Pool) Close() {
	p.mu.Lock()
	idle := p.idle
	p.idle, p.closed = nil, true
	p.mu.Unlock()
	for _, wk := range idle {
		close(wk.start)
	}
}

func (wk *worker) run() {
	for range wk.start {
		if t := wk.task; t != nil {
			wk.task = nil
			t.Run()
			wk.pool.put(wk)
			continue
		}
		wk.done <- wk.call()
	}
}

// call runs the handler, returning what it panicked with. Only
// http.ErrAbortHandler goes back as it is: any other panic carries the
// worker's stack, which the caller's recovery could not see.
func (wk *worker) call() (panicked any) {
	returned := false
	defer func() {
		v := recover()
		switch {
		case v == http.ErrAbortHandler:
			panicked = v
		case v != nil:
			panicked = fmt.Errorf("%v\n%s", v, debug.Stack())
		}
		wk.h, wk.w, wk.r = nil, nil, nil
		if v == nil && !returned {
			// runtime.Goexit: this goroutine ends once the deferred calls
			// are done, and run never reports for it.
			wk.done <- goexited{}
		}
	}()
	wk.h(wk.w, wk.r)
	returned = true
	return nil
}
