package provisioner

import "sync"

// latestBatch holds the provisioner's latest batch and whether what it
// applied must be forgotten (leadership started), for its run goroutine.
type latestBatch struct {
	mu     sync.Mutex
	batch  *dataPlaneBatch
	forgot bool
}

func (l *latestBatch) set(b *dataPlaneBatch) {
	l.mu.Lock()
	l.batch = b
	l.mu.Unlock()
}

func (l *latestBatch) get() *dataPlaneBatch {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.batch
}

func (l *latestBatch) forget() {
	l.mu.Lock()
	l.forgot = true
	l.mu.Unlock()
}

func (l *latestBatch) takeForget() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	f := l.forgot
	l.forgot = false
	return f
}
