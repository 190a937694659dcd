// Package reqctx holds Ctx, the context of one request served by Portico's
// HTTP/1 and HTTP/2 servers. It is an ordinary cancelable context (Done,
// Err, Value and context.Cause as context.WithCancelCause makes them) that
// also takes one hook to run when it is cancelled, without allocating:
// context.AfterFunc costs five allocations per call (its own context, the
// stop closure, the parent's done channel and children map), and the
// proxy ties every backend request to its client's context.
package reqctx

import (
	"context"
	"sync"
)

// Ctx is a request's context. The zero value is not usable: Init it. A Ctx
// may be embedded in a longer-lived per-request struct (it is then no
// allocation of its own); it must not be copied after Init.
type Ctx struct {
	context.Context // made by context.WithCancelCause
	cancel          context.CancelCauseFunc

	mu        sync.Mutex
	cancelled bool
	hook      func()
	// hookable is false when the parent can be cancelled: that
	// cancellation reaches the inner context without passing through
	// Cancel, and so would never run the hook.
	hookable bool
}

// Init makes c a child of parent, as context.WithCancelCause would.
func (c *Ctx) Init(parent context.Context) {
	c.Context, c.cancel = context.WithCancelCause(parent)
	c.hookable = parent.Done() == nil
}

// Cancel cancels c with cause (context.Canceled when nil), then runs the
// hook if one is set. The hook runs on the caller's goroutine, with
// whatever locks the caller holds: hooks must not block.
func (c *Ctx) Cancel(cause error) {
	c.cancel(cause)
	c.mu.Lock()
	c.cancelled = true
	h := c.hook
	c.hook = nil
	c.mu.Unlock()
	if h != nil {
		h()
	}
}

// Hook sets f to run once when c is cancelled; when c already is, f runs
// at once, on the caller's goroutine. It reports false, setting nothing,
// when c cannot take a hook: another one is set, or c's parent can be
// cancelled (see hookable); the caller then uses context.AfterFunc.
func (c *Ctx) Hook(f func()) bool {
	c.mu.Lock()
	if !c.hookable || c.hook != nil {
		c.mu.Unlock()
		return false
	}
	if c.cancelled {
		c.mu.Unlock()
		f()
		return true
	}
	c.hook = f
	c.mu.Unlock()
	return true
}

// Unhook removes the hook Hook set. Like the stop function of
// context.AfterFunc, it reports whether it stopped the hook from running:
// false means the hook ran or is running.
func (c *Ctx) Unhook() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.hook == nil {
		return false
	}
	c.hook = nil
	return true
}
