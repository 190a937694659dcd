package workers

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestServeRunsHandlerAndReturnsAfterIt(t *testing.T) {
	p := New(4)
	defer p.Close()
	var ran atomic.Bool
	w := httptest.NewRecorder()
	r := httptest.NewRequest(http.MethodGet, "/x", nil)
	p.Serve(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(10 * time.Millisecond)
		w.WriteHeader(http.StatusTeapot)
		ran.Store(r.URL.Path == "/x")
	}, w, r)
	if !ran.Load() || w.Code != http.StatusTeapot {
		t.Fatalf("Serve returned before the handler ran to its end: ran %v, code %d", ran.Load(), w.Code)
	}
}

// The point of the pool: requests one after another run on one goroutine,
// whose stack has grown already.
func TestWorkerReused(t *testing.T) {
	p := New(4)
	defer p.Close()
	ids := map[*worker]bool{}
	for range 10 {
		wk := p.get()
		ids[wk] = true
		wk.h = func(http.ResponseWriter, *http.Request) {}
		wk.start <- struct{}{}
		<-wk.done
		p.put(wk)
	}
	if len(ids) != 1 {
		t.Fatalf("10 requests in turn took %d workers, want 1", len(ids))
	}
}

func TestAbortPanicRaisedAgainAsItIs(t *testing.T) {
	p := New(4)
	defer p.Close()
	got := recoverFrom(func() {
		p.Serve(func(http.ResponseWriter, *http.Request) { panic(http.ErrAbortHandler) }, httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil))
	})
	if got != http.ErrAbortHandler {
		t.Fatalf("panic = %v, want http.ErrAbortHandler (a server aborts the stream on it alone)", got)
	}
	// The worker that panicked serves the next request.
	served := false
	p.Serve(func(http.ResponseWriter, *http.Request) { served = true }, httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil))
	if !served {
		t.Fatal("no request served after a panic")
	}
}

func TestOtherPanicCarriesWorkerStack(t *testing.T) {
	p := New(4)
	defer p.Close()
	got := recoverFrom(func() {
		p.Serve(func(http.ResponseWriter, *http.Request) { panicInHandler() }, httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil))
	})
	err, ok := got.(error)
	if !ok {
		t.Fatalf("panic = %#v, want an error", got)
	}
	if !strings.Contains(err.Error(), "boom") || !strings.Contains(err.Error(), "panicInHandler") {
		t.Fatalf("panic %q lacks the value or the stack where it happened", err)
	}
}

// TestGoexitEndsCaller: a handler that calls runtime.Goexit ends the
// caller too, as it would have ended the goroutine it ran on without the
// pool (x/net's server then resets the stream), instead of leaving the
// caller waiting for a worker that is gone.
func TestGoexitEndsCaller(t *testing.T) {
	p := New(4)
	defer p.Close()
	ended := make(chan bool, 1)
	go func() {
		returned := false
		defer func() { ended <- returned }()
		p.Serve(func(http.ResponseWriter, *http.Request) { runtime.Goexit() }, httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil))
		returned = true
	}()
	select {
	case returned := <-ended:
		if returned {
			t.Fatal("Serve returned normally after its handler called runtime.Goexit")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Serve still waits 5s after its handler called runtime.Goexit")
	}
	served := false
	p.Serve(func(http.ResponseWriter, *http.Request) { served = true }, httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil))
	if !served {
		t.Fatal("no request served after a Goexit")
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.idle) != 1 {
		t.Fatalf("%d idle workers after a Goexit and a request, want 1 (the gone one not pooled)", len(p.idle))
	}
}

func panicInHandler() { panic(errors.New("boom")) }

func recoverFrom(f func()) (v any) {
	defer func() { v = recover() }()
	f()
	return nil
}

func TestConcurrentRequestsGetTheirOwnWorkers(t *testing.T) {
	p := New(2)
	defer p.Close()
	const n = 20
	var wg sync.WaitGroup
	release := make(chan struct{})
	var inside atomic.Int32
	for i := range n {
		wg.Go(func() {
			r := httptest.NewRequest("GET", "/", nil)
			r.Header.Set("N", string(rune('a'+i)))
			w := httptest.NewRecorder()
			p.Serve(func(w http.ResponseWriter, r *http.Request) {
				inside.Add(1)
				<-release
				w.Header().Set("N", r.Header.Get("N"))
			}, w, r)
			if w.Header().Get("N") != string(rune('a'+i)) {
				t.Errorf("request %d answered with another's header %q", i, w.Header().Get("N"))
			}
		})
	}
	for inside.Load() < n {
		time.Sleep(time.Millisecond)
	}
	close(release) // all n ran at once: none waited for a worker
	wg.Wait()
	p.mu.Lock()
	idle := len(p.idle)
	p.mu.Unlock()
	if idle != 2 {
		t.Fatalf("%d idle workers kept, want the limit 2", idle)
	}
}

func TestCloseEndsWorkers(t *testing.T) {
	before := runtime.NumGoroutine()
	p := New(8)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			p.Serve(func(http.ResponseWriter, *http.Request) { time.Sleep(5 * time.Millisecond) }, httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil))
		})
	}
	wg.Wait()
	p.Close()
	// One given back after Close ends too.
	p.Serve(func(http.ResponseWriter, *http.Request) {}, httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil))
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines after Close, %d before the pool", runtime.NumGoroutine(), before)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// taskFunc is a Task that records the goroutine it ran on.
type taskFunc func()

func (f taskFunc) Run() { f() }

// TestGoReusesWorkerAndSurvivesGoexit: tasks handed over with Go, one
// after another, run on one worker; a task that calls runtime.Goexit ends
// its worker only, and the next task gets another.
func TestGoReusesWorkerAndSurvivesGoexit(t *testing.T) {
	var p Pool // the zero value is usable
	defer p.Close()
	stacks := map[string]bool{}
	run := func(f func()) {
		done := make(chan string, 1)
		p.Go(taskFunc(func() {
			buf := make([]byte, 64)
			id := strings.Fields(string(buf[:runtime.Stack(buf, false)]))[1] // "goroutine N [running]"
			defer func() { done <- id }()
			f()
		}))
		select {
		case id := <-done:
			stacks[id] = true
		case <-time.After(5 * time.Second):
			t.Fatal("task never ran")
		}
	}
	for range 5 {
		run(func() {})
		waitIdle(t, &p, 1)
	}
	if len(stacks) != 1 {
		t.Fatalf("5 tasks in turn ran on %d goroutines, want 1", len(stacks))
	}
	run(runtime.Goexit)
	run(func() {})
	if len(stacks) != 2 {
		t.Fatalf("after a Goexit the next task ran on %d goroutines in all, want a second one", len(stacks))
	}
}

// waitIdle waits until p keeps n idle workers: a task's worker goes back
// after the task has returned, a moment after what it signalled.
func waitIdle(t *testing.T, p *Pool, n int) {
	t.Helper()
	for start := time.Now(); time.Since(start) < 5*time.Second; time.Sleep(time.Millisecond) {
		p.mu.Lock()
		idle := len(p.idle)
		p.mu.Unlock()
		if idle == n {
			return
		}
	}
	t.Fatalf("pool never had %d idle workers", n)
}
