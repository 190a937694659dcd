package translate

import (
	"testing"
	"time"

	"portico.dev/portico/internal/controlplane/snapshot"
)

// TestMemoryEarliestExpiry: the memory reports when the first certificate
// it serves expires, for the expiry alert, and forgets certificates no
// longer used.
func TestMemoryEarliestExpiry(t *testing.T) {
	_, res := loadGolden(t, "testdata/golden/https-sni-certificates.in.yaml")
	_, mem := Translate(Settings{}, res, Memory{})
	// The golden certificates are valid until 2125-01-01.
	if got, want := mem.EarliestExpiry(), time.Date(2125, 1, 1, 0, 0, 0, 0, time.UTC); !got.Equal(want) {
		t.Errorf("earliest expiry %v, want %v", got, want)
	}
	_, mem = Translate(Settings{}, &snapshot.Resources{}, mem)
	if got := mem.EarliestExpiry(); !got.IsZero() {
		t.Errorf("with no certificate used: %v, want the zero time", got)
	}
}
