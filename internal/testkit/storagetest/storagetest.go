// Package storagetest checks that a certmagic.Storage keeps the contract
// Portico relies on: values stored by one replica are read by another, keys
// behave as paths, and a lock is held by one holder at a time across
// replicas and passes on when its holder dies.
package storagetest

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddyserver/certmagic"
)

// Fixture is one fresh, empty backing store.
type Fixture struct {
	// Replica returns another Storage over the backing store, as another
	// replica of Portico would have.
	Replica func(t *testing.T) certmagic.Storage
	// HoldAndDie leaves the lock name held by a holder that then dies
	// without releasing it.
	HoldAndDie func(t *testing.T, name string)
	// TakeoverWithin bounds how long a dead holder's lock may block
	// others.
	TakeoverWithin time.Duration
}

// Run runs the contract tests as subtests of t; open makes the Fixture of
// each.
func Run(t *testing.T, open func(t *testing.T) *Fixture) {
	for _, tc := range []struct {
		name string
		fn   func(*testing.T, *Fixture)
	}{
		{"StoreLoad", testStoreLoad},
		{"Stat", testStat},
		{"List", testList},
		{"Delete", testDelete},
		{"LockExclusion", testLockExclusion},
		{"LockContext", testLockContext},
		{"TryLock", testTryLock},
		{"LockTakeover", testLockTakeover},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, open(t)) })
	}
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func testStoreLoad(t *testing.T, f *Fixture) {
	ctx := ctxFor(t)
	a, b := f.Replica(t), f.Replica(t)
	key := "certificates/acme-v02/app.portico.test/app.portico.test.crt"
	if _, err := a.Load(ctx, key); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Load of a missing key: err = %v, want fs.ErrNotExist", err)
	}
	if a.Exists(ctx, key) {
		t.Fatal("Exists of a missing key is true")
	}
	first := []byte("first value\x00\xff")
	if err := a.Store(ctx, key, first); err != nil {
		t.Fatal(err)
	}
	if got, err := b.Load(ctx, key); err != nil || !bytes.Equal(got, first) {
		t.Fatalf("other replica loads %q, %v; want %q", got, err, first)
	}
	second := bytes.Repeat([]byte("x"), 64<<10)
	if err := b.Store(ctx, key, second); err != nil {
		t.Fatal(err)
	}
	if got, err := a.Load(ctx, key); err != nil || !bytes.Equal(got, second) {
		t.Fatalf("after overwrite, load %d bytes, %v; want %d bytes", len(got), err, len(second))
	}
	if !b.Exists(ctx, key) || !b.Exists(ctx, "certificates/acme-v02") {
		t.Fatal("Exists is false for a stored key or its directory")
	}
	// A key is a path: a string prefix that is not a component is no
	// directory.
	if b.Exists(ctx, "certificates/acme") {
		t.Fatal(`Exists("certificates/acme") is true; only "certificates/acme-v02" exists`)
	}

	// Concurrent writers of one key leave one of their values, whole.
	var wg sync.WaitGroup
	values := [][]byte{[]byte("from a"), []byte("from b")}
	for i, s := range []certmagic.Storage{a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := s.Store(ctx, key, values[i]); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	got, err := a.Load(ctx, key)
	if err != nil || !slices.ContainsFunc(values, func(v []byte) bool { return bytes.Equal(v, got) }) {
		t.Fatalf("after concurrent stores, load %q, %v", got, err)
	}
}

func testStat(t *testing.T, f *Fixture) {
	ctx := ctxFor(t)
	s := f.Replica(t)
	key := "acme/ca/users/admin@portico.test/admin.json"
	value := []byte(`{"email":"admin@portico.test"}`)
	before := time.Now()
	if err := s.Store(ctx, key, value); err != nil {
		t.Fatal(err)
	}
	after := time.Now()
	info, err := s.Stat(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if info.Key != key || !info.IsTerminal || info.Size != int64(len(value)) {
		t.Errorf("Stat(file) = %+v, want key %q, terminal, size %d", info, key, len(value))
	}
	// File systems keep coarse times; a second either way is plenty.
	if info.Modified.Before(before.Add(-time.Second)) || info.Modified.After(after.Add(time.Second)) {
		t.Errorf("Stat(file).Modified = %v, stored between %v and %v", info.Modified, before, after)
	}
	dir := "acme/ca/users"
	info, err = s.Stat(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	if info.Key != dir || info.IsTerminal {
		t.Errorf("Stat(dir) = %+v, want key %q, not terminal", info, dir)
	}
	if _, err := s.Stat(ctx, "acme/ca/nobody"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Stat(missing): err = %v, want fs.ErrNotExist", err)
	}
}

func storeAll(t *testing.T, ctx context.Context, s certmagic.Storage, keys ...string) {
	t.Helper()
	for _, k := range keys {
		if err := s.Store(ctx, k, []byte(k)); err != nil {
			t.Fatal(err)
		}
	}
}

func testList(t *testing.T, f *Fixture) {
	ctx := ctxFor(t)
	a, b := f.Replica(t), f.Replica(t)
	storeAll(t, ctx, a,
		"certificates/ca1/a.test/a.test.crt",
		"certificates/ca1/a.test/a.test.key",
		"certificates/ca1/b.test/b.test.crt",
		"certificates/ca2/c.test/c.test.json",
		"certificates/ca10/d.test/d.test.crt",
		"ocsp/a.test-1234",
	)
	for _, tc := range []struct {
		dir       string
		recursive bool
		want      []string
	}{
		{"certificates", false, []string{"certificates/ca1", "certificates/ca10", "certificates/ca2"}},
		{"certificates/ca1", false, []string{"certificates/ca1/a.test", "certificates/ca1/b.test"}},
		{"certificates/ca1/a.test", false, []string{"certificates/ca1/a.test/a.test.crt", "certificates/ca1/a.test/a.test.key"}},
		{"certificates/ca1", true, []string{
			"certificates/ca1/a.test",
			"certificates/ca1/a.test/a.test.crt",
			"certificates/ca1/a.test/a.test.key",
			"certificates/ca1/b.test",
			"certificates/ca1/b.test/b.test.crt",
		}},
		{"ocsp", false, []string{"ocsp/a.test-1234"}},
	} {
		got, err := b.List(ctx, tc.dir, tc.recursive)
		if err != nil {
			t.Errorf("List(%q, %v): %v", tc.dir, tc.recursive, err)
			continue
		}
		slices.Sort(got)
		if !slices.Equal(got, tc.want) {
			t.Errorf("List(%q, %v) = %q, want %q", tc.dir, tc.recursive, got, tc.want)
		}
	}
	for _, dir := range []string{"nothing", "certificates/ca", "certificates/ca3"} {
		if got, err := b.List(ctx, dir, false); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("List(%q) = %q, %v; want fs.ErrNotExist", dir, got, err)
		}
	}
}

func testDelete(t *testing.T, f *Fixture) {
	ctx := ctxFor(t)
	a, b := f.Replica(t), f.Replica(t)
	storeAll(t, ctx, a,
		"certificates/ca1/a.test/a.test.crt",
		"certificates/ca1/a.test/a.test.key",
		"certificates/ca1/b.test/b.test.crt",
		"certificates/ca2/a.test/a.test.crt",
	)
	if err := b.Delete(ctx, "certificates/ca1/a.test/a.test.key"); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Load(ctx, "certificates/ca1/a.test/a.test.key"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Load after Delete: err = %v, want fs.ErrNotExist", err)
	}
	if _, err := a.Load(ctx, "certificates/ca1/a.test/a.test.crt"); err != nil {
		t.Fatalf("Delete removed a sibling: %v", err)
	}
	// Deleting what is not there is no error.
	if err := b.Delete(ctx, "certificates/ca1/a.test/a.test.key"); err != nil {
		t.Fatalf("Delete of a missing key: %v", err)
	}
	// Deleting a directory deletes everything under it, and nothing else.
	if err := b.Delete(ctx, "certificates/ca1"); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"certificates/ca1", "certificates/ca1/a.test/a.test.crt", "certificates/ca1/b.test/b.test.crt"} {
		if a.Exists(ctx, k) {
			t.Errorf("%q exists after deleting its directory", k)
		}
	}
	if _, err := a.Load(ctx, "certificates/ca2/a.test/a.test.crt"); err != nil {
		t.Fatalf("Delete of a directory removed a key outside it: %v", err)
	}
}

func testLockExclusion(t *testing.T, f *Fixture) {
	ctx := ctxFor(t)
	replicas := []certmagic.Storage{f.Replica(t), f.Replica(t)}
	const name = "issue_cert_app.portico.test"
	var inside, most, entered atomic.Int32
	var wg sync.WaitGroup
	// Two holders per replica: a lock also excludes callers in one process.
	for i := range 4 {
		s := replicas[i%2]
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := s.Lock(ctx, name); err != nil {
				t.Error(err)
				return
			}
			n := inside.Add(1)
			for {
				m := most.Load()
				if n <= m || most.CompareAndSwap(m, n) {
					break
				}
			}
			entered.Add(1)
			// Hold long enough that every other caller is waiting.
			time.Sleep(100 * time.Millisecond)
			inside.Add(-1)
			if err := s.Unlock(ctx, name); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if most.Load() != 1 || entered.Load() != 4 {
		t.Fatalf("%d callers entered, at most %d at once; want 4, one at a time", entered.Load(), most.Load())
	}
}

func testLockContext(t *testing.T, f *Fixture) {
	ctx := ctxFor(t)
	a, b := f.Replica(t), f.Replica(t)
	const name = "issue_cert_ctx.portico.test"
	if err := a.Lock(ctx, name); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if err := b.Lock(short, name); err == nil {
		t.Fatal("Lock of a held lock returned without error when its context ended")
	}
	if err := a.Unlock(ctx, name); err != nil {
		t.Fatal(err)
	}
	if err := b.Lock(ctx, name); err != nil {
		t.Fatalf("Lock after release: %v", err)
	}
	if err := b.Unlock(ctx, name); err != nil {
		t.Fatal(err)
	}
}

func testTryLock(t *testing.T, f *Fixture) {
	ctx := ctxFor(t)
	a, b := f.Replica(t), f.Replica(t)
	ta, ok1 := a.(certmagic.TryLocker)
	tb, ok2 := b.(certmagic.TryLocker)
	if !ok1 || !ok2 {
		t.Skip("storage has no TryLock")
	}
	const name = "ari_1234"
	if ok, err := ta.TryLock(ctx, name); err != nil || !ok {
		t.Fatalf("TryLock of a free lock = %v, %v", ok, err)
	}
	if ok, err := tb.TryLock(ctx, name); err != nil || ok {
		t.Fatalf("TryLock of a held lock = %v, %v; want false", ok, err)
	}
	if err := ta.Unlock(ctx, name); err != nil {
		t.Fatal(err)
	}
	if ok, err := tb.TryLock(ctx, name); err != nil || !ok {
		t.Fatalf("TryLock after release = %v, %v", ok, err)
	}
	if err := tb.Unlock(ctx, name); err != nil {
		t.Fatal(err)
	}
}

func testLockTakeover(t *testing.T, f *Fixture) {
	const name = "issue_cert_dead.portico.test"
	f.HoldAndDie(t, name)
	s := f.Replica(t)
	ctx, cancel := context.WithTimeout(context.Background(), f.TakeoverWithin)
	defer cancel()
	start := time.Now()
	if err := s.Lock(ctx, name); err != nil {
		t.Fatalf("lock of a dead holder not taken over within %v: %v", f.TakeoverWithin, err)
	}
	t.Logf("took over a dead holder's lock after %v", time.Since(start).Round(time.Millisecond))
	if err := s.Unlock(context.Background(), name); err != nil {
		t.Fatal(err)
	}
}
