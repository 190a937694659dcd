package pipeline

import (
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"portico.dev/portico/translate"
)

// TestSinceChange: a rebuild that a change asked for reports how long the
// change took to be served, counted from the first change of the burst; a
// rebuild no change asked for reports none.
func TestSinceChange(t *testing.T) {
	var reports []ApplyReport
	l := New(Options{Translate: translate.Settings{}}, fileSource(t, classYAML), newRuntime(t), nil,
		Outputs{Applied: func(r ApplyReport) { reports = append(reports, r) }}, zaptest.NewLogger(t))
	if err := l.Rebuild(); err != nil {
		t.Fatal(err)
	}
	l.Changed()
	const wait = 50 * time.Millisecond
	time.Sleep(wait)
	l.Changed() // the burst's second change does not restart the clock
	if err := l.Rebuild(); err != nil {
		t.Fatal(err)
	}
	if err := l.Rebuild(); err != nil {
		t.Fatal(err)
	}
	if len(reports) != 3 {
		t.Fatalf("%d reports", len(reports))
	}
	if reports[0].SinceChange != 0 || reports[2].SinceChange != 0 {
		t.Errorf("rebuilds without a change report %v and %v", reports[0].SinceChange, reports[2].SinceChange)
	}
	if reports[1].SinceChange < wait {
		t.Errorf("SinceChange %v, want at least the %v since the first change", reports[1].SinceChange, wait)
	}
}
