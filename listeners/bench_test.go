package listeners

import (
	"fmt"
	"testing"
	"time"

	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// benchInput is one Gateway with n ListenerSets, each in its own namespace
// with one HTTPS listener whose certificate lives next to it.
func benchInput(n int) Input {
	gw := newGateway("infra", "gw", gwv1.NamespacesFromAll,
		httpListener("http", "", 80), httpsListener("https", "www.example.com", "default-cert"))
	sets := make([]*gwv1.ListenerSet, n)
	for i := range sets {
		ns := fmt.Sprintf("svc-%05d", i)
		// Creation times repeat so that both sort keys are exercised.
		sets[n-1-i] = newListenerSet(ns, "listeners", epoch.Add(time.Duration(i%50)*time.Second), gw,
			entry(httpsListener("https", ns+".apps.example.com", "tls")))
	}
	return Input{Gateway: gw, ClassAccepted: true, ListenerSets: sets, Certificates: func(string, string) error { return nil }}
}

func TestBenchInputIsAllAccepted(t *testing.T) {
	res := run(t, benchInput(500))
	if got := *res.Gateway.AttachedListenerSets; got != 500 {
		t.Fatalf("attachedListenerSets = %d, want 500", got)
	}
	if got := len(serving(res)); got != 502 {
		t.Fatalf("%d listeners serve, want 502", got)
	}
}

func BenchmarkMerge5000(b *testing.B) {
	in := benchInput(5000)
	b.ReportAllocs()
	for b.Loop() {
		res := Merge(in)
		if len(res.Listeners) != 5002 {
			b.Fatalf("%d listeners", len(res.Listeners))
		}
	}
}
