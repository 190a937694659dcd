package httpdate

import (
	"net/http"
	"testing"
	"time"
)

// TestCacheFollowsTheSecond: within one second both forms stay the same
// text; a new second gives the new date, in both forms.
func TestCacheFollowsTheSecond(t *testing.T) {
	var d Cache
	t0 := time.Date(2026, 11, 25, 4, 5, 6, 100, time.FixedZone("x", 3600))
	want := t0.UTC().Format(http.TimeFormat)
	if got := d.String(t0); got != want {
		t.Fatalf("String = %q, want %q", got, want)
	}
	if got := string(d.Bytes(t0.Add(800 * time.Millisecond))); got != want {
		t.Fatalf("Bytes later in the second = %q, want %q", got, want)
	}
	t1 := t0.Add(time.Second)
	want1 := t1.UTC().Format(http.TimeFormat)
	if got := string(d.Bytes(t1)); got != want1 {
		t.Fatalf("Bytes next second = %q, want %q", got, want1)
	}
	if got := d.String(t1); got != want1 {
		t.Fatalf("String next second = %q, want %q", got, want1)
	}
}
