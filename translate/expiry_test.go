package translate

import (
	"crypto/tls"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"portico.dev/portico/internal/shared/layered"
)

// TestExpiriesMatchScan: through random adds, rotations and removals of
// key pairs (overlays growing, flattened into new bases), the earliest
// expiry from the sorted base and the overlay is the earliest of a scan of
// every key pair, which it replaces.
func TestExpiriesMatchScan(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 8))
	epoch := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	pair := func() parsedCert {
		if r.IntN(10) == 0 {
			return parsedCert{} // not parsed: no expiry
		}
		return parsedCert{cert: &tls.Certificate{}, notAfter: epoch.Add(time.Duration(r.IntN(100_000)) * time.Hour)}
	}
	base := map[types.NamespacedName]parsedCert{}
	for i := range 300 {
		base[types.NamespacedName{Namespace: "apps", Name: fmt.Sprint(i)}] = pair()
	}
	certs := layered.Of(base)
	x := &expiries{}
	scan := func() time.Time {
		var earliest time.Time
		for _, p := range certs.All() {
			if p.cert != nil && (earliest.IsZero() || p.notAfter.Before(earliest)) {
				earliest = p.notAfter
			}
		}
		return earliest
	}
	flattened := 0
	for step := range 2000 {
		e := certs.Edit()
		for range 1 + r.IntN(3) {
			key := types.NamespacedName{Namespace: "apps", Name: fmt.Sprint(r.IntN(400))}
			if r.IntN(3) == 0 {
				e.Delete(key)
			} else {
				e.Set(key, pair())
			}
		}
		before := certs.Base()
		certs = e.Done()
		if reflect.ValueOf(certs.Base()).Pointer() != reflect.ValueOf(before).Pointer() {
			flattened++
		}
		if got, want := x.earliest(certs), scan(); !got.Equal(want) {
			t.Fatalf("step %d: earliest %v, a scan says %v", step, got, want)
		}
	}
	if flattened == 0 {
		t.Error("no overlay was flattened: the test did not cover a new base")
	}
}
