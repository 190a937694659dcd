package kubelet

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestLogLinesByTime(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.log")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	out := &lineWriter{mu: &mu, out: f, stream: "stdout"}
	errw := &lineWriter{mu: &mu, out: f, stream: "stderr"}
	// Lines arrive in pieces; only complete lines are written.
	out.Write([]byte("first li"))
	out.Write([]byte("ne\nsecond\n"))
	time.Sleep(1100 * time.Millisecond)
	mid := time.Now().UTC().Truncate(time.Second)
	errw.Write([]byte("third\nunterminated"))
	if err := errw.Close(); err != nil {
		t.Fatal(err)
	}
	f.Close()

	for _, tc := range []struct {
		name  string
		query map[string][]string
		want  string
	}{
		{"all", nil, "first line\nsecond\nthird\nunterminated\n"},
		{"since", map[string][]string{"sinceTime": {mid.Format(time.RFC3339)}}, "third\nunterminated\n"},
		{"tail", map[string][]string{"tailLines": {"1"}}, "unterminated\n"},
		{"limit", map[string][]string{"limitBytes": {"5"}}, "first"},
	} {
		o, err := parseLogOptions(tc.query, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		got, err := readLog(path, o)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
	o, _ := parseLogOptions(map[string][]string{"timestamps": {"true"}, "tailLines": {"1"}}, time.Now())
	got, _ := readLog(path, o)
	ts, text, _ := strings.Cut(strings.TrimSuffix(string(got), "\n"), " ")
	if _, err := time.Parse(time.RFC3339Nano, ts); err != nil || text != "unterminated" {
		t.Errorf("with timestamps: %q", got)
	}
	if _, err := parseLogOptions(map[string][]string{"sinceTime": {"yesterday"}}, time.Now()); err == nil {
		t.Error("bad sinceTime: no error")
	}
}
