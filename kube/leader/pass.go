package leader

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// retry is how often a leader-only writer looks again without being
// woken: writes that failed are retried at this pace.
const retry = 2 * time.Second

// notice is how soon a writer starts its first pass after its replica
// gains the lease: nothing wakes it then, and the changes that came while
// no replica led (a leader stopped, the others waiting for their next
// try) have waited long enough.
const notice = 100 * time.Millisecond

// RunWhileLeading calls pass after every wake and every tick while this
// replica leads, until ctx ends. fresh is true on the first pass of each
// term: another replica may have led in between, so everything must be
// looked at again, not only what changed here. A term's first pass comes
// within notice of its start.
func RunWhileLeading(ctx context.Context, wake <-chan struct{}, leading func() bool, pass func(ctx context.Context, fresh bool)) {
	runWhileLeading(ctx, wake, leading, pass, retry)
}

func runWhileLeading(ctx context.Context, wake <-chan struct{}, leading func() bool, pass func(ctx context.Context, fresh bool), every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	n := time.NewTicker(notice)
	defer n.Stop()
	led := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-wake:
		case <-t.C:
		case <-n.C:
			if leading() == led {
				continue // no term began or ended
			}
		}
		if !leading() {
			led = false
			continue
		}
		pass(ctx, !led)
		led = true
	}
}

// TakeDirty hands a pass the keys it must look at, every key of results when
// all is set, and leaves an empty set for the changes that come meanwhile.
// The caller holds the lock that guards the three.
func TakeDirty[R any](dirty *map[types.NamespacedName]struct{}, all *bool, results map[types.NamespacedName]R) map[types.NamespacedName]struct{} {
	out := *dirty
	if *all {
		out = make(map[types.NamespacedName]struct{}, len(results))
		for key := range results {
			out[key] = struct{}{}
		}
		*all = false
	}
	*dirty = map[types.NamespacedName]struct{}{}
	return out
}
