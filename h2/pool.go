package h2

import "sync"

// pool keeps the goroutines that run stream handlers: a goroutine's stack
// grows while it forwards a request, and stays grown for the next stream
// (see internal/workers). Handing a stream over is one channel send; a
// worker puts itself back when its stream is done.
type pool struct {
	mu     sync.Mutex
	idle   []*worker
	closed bool
}

type worker struct {
	p    *pool
	next chan *stream
}

// run serves st on an idle worker, or on a new one.
func (p *pool) run(st *stream) {
	p.mu.Lock()
	if n := len(p.idle); n > 0 {
		wk := p.idle[n-1]
		p.idle[n-1] = nil
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		wk.next <- st
		return
	}
	p.mu.Unlock()
	wk := &worker{p: p, next: make(chan *stream, 1)}
	wk.next <- st
	go wk.loop()
}

func (wk *worker) loop() {
	for st := range wk.next {
		if !st.serve() {
			return // runtime.Goexit in the handler: this goroutine is done
		}
		if !wk.p.put(wk) {
			return
		}
	}
}

// put keeps wk idle; false when the pool is full or closed, and wk ends.
func (p *pool) put(wk *worker) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || len(p.idle) >= maxIdleWorkers {
		return false
	}
	p.idle = append(p.idle, wk)
	return true
}

// closeIdle ends the idle workers; the pool keeps none from now on.
func (p *pool) closeIdle() {
	p.mu.Lock()
	idle := p.idle
	p.idle, p.closed = nil, true
	p.mu.Unlock()
	for _, wk := range idle {
		close(wk.next)
	}
}
