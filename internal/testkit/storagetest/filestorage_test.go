package storagetest

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/caddyserver/certmagic"
)

// TestFileStorage holds certmagic's FileStorage, which standalone Portico
// uses in its data directory, to the same contract.
func TestFileStorage(t *testing.T) {
	Run(t, func(t *testing.T) *Fixture {
		dir := t.TempDir()
		return &Fixture{
			Replica: func(*testing.T) certmagic.Storage { return &certmagic.FileStorage{Path: dir} },
			// A holder that died left its lock file behind, last
			// refreshed a minute ago, with nobody refreshing it.
			HoldAndDie: func(t *testing.T, name string) {
				stale := time.Now().Add(-time.Minute)
				b, err := json.Marshal(map[string]time.Time{"created": stale, "updated": stale})
				if err != nil {
					t.Fatal(err)
				}
				lock := filepath.Join(dir, "locks", certmagic.StorageKeys.Safe(name)+".lock")
				if err := os.MkdirAll(filepath.Dir(lock), 0o700); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(lock, b, 0o644); err != nil {
					t.Fatal(err)
				}
			},
			TakeoverWithin: 5 * time.Second,
		}
	})
}
