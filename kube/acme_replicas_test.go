package kube

import (
	"context"
	"crypto/tls"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"portico.dev/portico/internal/controlplane/acme"
	"portico.dev/portico/internal/controlplane/wellknown"
	"portico.dev/portico/internal/testkit/acmetest"
	"portico.dev/portico/internal/testkit/freeport"
	"portico.dev/portico/internal/testkit/kubetest"
	"portico.dev/portico/kube/acmecerts"
	"portico.dev/portico/kube/secretstorage"
	"portico.dev/portico/proxy"
)

// answering counts the challenge requests a replica answered.
type answering struct {
	*acme.Manager
	answered atomic.Int64
}

func (a *answering) HandleHTTPChallenge(w http.ResponseWriter, r *http.Request) bool {
	ok := a.Manager.HandleHTTPChallenge(w, r)
	if ok {
		a.answered.Add(1)
	}
	return ok
}

// acmeReplica is what a test reads of one replica's ACME manager.
type acmeReplica struct {
	events     *acmeEvents
	challenges *answering
}

// startACMEReplica runs a replica through startPortico with an ACME
// manager of its own over Secret storage in portico-system, the namespace
// every replica shares. The runtime is made again here because the one
// startPortico makes cannot answer challenges; this one is closed after
// the replica stopped.
func startACMEReplica(f *clusterFixture, pebble *acmetest.Server, bind, identity string) (*clusterInstance, *acmeReplica) {
	t := f.T
	t.Helper()
	events := &acmeEvents{counts: map[string]int{}}
	challenges := &answering{}
	log := zaptest.NewLogger(t).Named(identity)
	inst := f.startPortico(f.Env.Config, bind, identity, func(s *replicaSetup) {
		c := s.c
		storage, err := secretstorage.New(c.Kube, secretstorage.Options{Namespace: "portico-system", Identity: identity})
		if err != nil {
			t.Fatal(err)
		}
		recorder := NewACMEEvents(c, identity)
		mgr, err := acme.New(acme.Options{
			Directory:    pebble.DirectoryURL,
			TrustedRoots: pebble.DirectoryRoots,
			Storage:      storage,
			MinBackoff:   time.Second,
			OnChange:     s.changed,
			Observer:     events,
			OnEvent:      recorder.Record,
			Logger:       log.Named("acme"),
		})
		if err != nil {
			t.Fatal(err)
		}
		s.acme = mgr
		challenges.Manager = mgr
		opts := proxy.DefaultOptions()
		opts.BindAddress = bind
		opts.DrainTimeout = 2 * time.Second
		opts.Challenges = challenges
		rt := proxy.New(opts, log.Named("proxy"))
		s.rt = rt
		// Registered before startPortico registers the replica's stop,
		// so it runs after it.
		t.Cleanup(func() {
			mgr.Close()
			recorder.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = rt.Close(ctx)
		})
	})
	return inst, &acmeReplica{events: events, challenges: challenges}
}

// TestClusterACMETwoReplicas runs two replicas against one API server and
// one Pebble: a ListenerSet that opted in to ACME gets exactly one order
// for its hostname, whichever replica Pebble validates against answers the
// challenge from the shared storage, and both replicas serve the issued
// certificate.
func TestClusterACMETwoReplicas(t *testing.T) {
	const host = "app.portico.test"
	httpPort, httpsPort := freeport.Port(t), freeport.Port(t)
	pebble := acmetest.Start(t, acmetest.Options{HTTPPort: httpPort})
	// Either replica may be the one Pebble validates against (it takes
	// the first address), and either may place the order: the challenge
	// is answered across replicas whenever the two differ.
	binds := []string{"127.0.0.1", "127.0.0.2"}
	rand.Shuffle(len(binds), func(i, j int) { binds[i], binds[j] = binds[j], binds[i] })
	if err := pebble.SetA(t.Context(), host, binds...); err != nil {
		t.Fatal(err)
	}
	f := &clusterFixture{&kubetest.ClusterFixture{T: t, Env: kubetest.Start(t)}}
	f.Kube, f.Gateway = kubetest.Clients(t, f.Env.Config)
	ctx := t.Context()
	for _, ns := range []string{"portico-system", "apps"} {
		mustCreate(t)(f.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}))
	}
	a, ra := startACMEReplica(f, pebble, "127.0.0.1", "replica-a")
	b, rb := startACMEReplica(f, pebble, "127.0.0.2", "replica-b")

	gws := f.Gateway.GatewayV1()
	createClassAndGateway(t, f.Gateway, httpPort)
	mustCreate(t)(gws.ListenerSets("apps").Create(ctx, &gwv1.ListenerSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "app", Annotations: map[string]string{wellknown.ACMEAnnotation: wellknown.ACMEHTTP01}},
		Spec: gwv1.ListenerSetSpec{
			ParentRef: gwv1.ParentGatewayReference{Name: "gw"},
			Listeners: []gwv1.ListenerEntry{{
				Name: "https", Hostname: ptr.To(gwv1.Hostname(host)),
				Port: gwv1.PortNumber(httpsPort), Protocol: gwv1.HTTPSProtocolType,
				TLS: &gwv1.ListenerTLSConfig{CertificateRefs: []gwv1.SecretObjectReference{{Name: "app-tls"}}},
			}},
		},
	}, metav1.CreateOptions{}))
	start := time.Now()

	// Both serve it, each on its own address.
	var leaves [][]byte
	for _, inst := range []*clusterInstance{a, b} {
		addr := inst.addr(int32(httpsPort))
		kubetest.WaitFor(t, 90*time.Second, "handshake for "+host+" at "+addr, func() error {
			conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 2 * time.Second}, "tcp", addr,
				&tls.Config{ServerName: host, RootCAs: pebble.Roots, MinVersion: tls.VersionTLS12})
			if err != nil {
				return err
			}
			defer conn.Close()
			leaf := conn.ConnectionState().PeerCertificates[0]
			if !slices.Equal(leaf.DNSNames, []string{host}) {
				return fmt.Errorf("leaf names %q, want [%s]", leaf.DNSNames, host)
			}
			leaves = append(leaves, leaf.Raw)
			return nil
		})
		t.Logf("%s serves the certificate for %s %v after the ListenerSet", addr, host, time.Since(start).Round(time.Millisecond))
	}
	if !slices.Equal(leaves[0], leaves[1]) {
		t.Error("the replicas serve different certificates")
	}

	// One order in all: the replica that lost the race for the storage
	// lock found the certificate there. Wait a little so that a second
	// order, had one started, would have been counted.
	time.Sleep(2 * time.Second)
	t.Logf("Pebble resolves %s first; replica-a (127.0.0.1) ordered %d and answered %d challenge requests, replica-b (127.0.0.2) ordered %d and answered %d",
		binds[0], ra.events.get("obtained"), ra.challenges.answered.Load(), rb.events.get("obtained"), rb.challenges.answered.Load())
	obtained := ra.events.get("obtained") + rb.events.get("obtained")
	failed := ra.events.get("failed") + rb.events.get("failed")
	if obtained != 1 || failed != 0 {
		t.Errorf("orders: %d obtained (replica-a %d, replica-b %d), %d failed; want exactly one, obtained",
			obtained, ra.events.get("obtained"), rb.events.get("obtained"), failed)
	}
	// The order is on record once, on the ListenerSet, from the replica
	// that placed it.
	var issued []corev1.Event
	kubetest.WaitFor(t, 10*time.Second, "CertificateIssued Event on ListenerSet apps/app", func() error {
		list, err := f.Kube.CoreV1().Events("apps").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.kind=ListenerSet,involvedObject.name=app"})
		if err != nil {
			return err
		}
		issued = issued[:0]
		for _, e := range list.Items {
			if e.Reason == acmecerts.ReasonCertificateIssued {
				issued = append(issued, e)
			}
		}
		if len(issued) == 0 {
			return fmt.Errorf("none among %d Events", len(list.Items))
		}
		return nil
	})
	if len(issued) != 1 || issued[0].Count > 1 {
		t.Errorf("%d CertificateIssued Events (first counted %d times), want one, once", len(issued), issued[0].Count)
	}
	e := issued[0]
	if e.Type != corev1.EventTypeNormal || !strings.Contains(e.Message, host) || e.InvolvedObject.UID == "" ||
		e.InvolvedObject.APIVersion != gwv1.GroupVersion.String() {
		t.Errorf("Event %s %q on %+v; want Normal, naming %s, on the ListenerSet with its UID", e.Type, e.Message, e.InvolvedObject, host)
	}
	if ra.challenges.answered.Load()+rb.challenges.answered.Load() == 0 {
		t.Error("no replica answered a challenge request")
	}
	for _, inst := range []*clusterInstance{a, b} {
		if got := inst.c.ACME.Hostnames(); !slices.Equal(got, []string{host}) {
			t.Errorf("replica at %s: manager holds %q, want only %s", inst.bind, got, host)
		}
		if _, ok := inst.c.ACME.Certificate(host); !ok {
			t.Errorf("replica at %s holds no certificate for %s", inst.bind, host)
		}
	}
}
