package kingress

import (
	"cmp"
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"portico.dev/portico/config"
	"portico.dev/portico/internal/controlplane/knative"
	"portico.dev/portico/internal/testkit/kubetest"
	"portico.dev/portico/internal/testkit/snitest"
)

const knHello = `apiVersion: networking.internal.knative.dev/v1alpha1
kind: Ingress
metadata:
  name: hello
  namespace: serving
  annotations: {networking.knative.dev/ingress.class: portico.ingress.networking.knative.dev}
spec:
  httpOption: Enabled
  rules:
  - hosts: [hello.serving.example.com]
    visibility: ExternalIP
    http:
      paths:
      - headers: {Knative-Serving-Tag: {exact: canary}}
        splits:
        - {serviceNamespace: serving, serviceName: hello-2, servicePort: 80}
        appendHeaders: {Knative-Serving-Tag: canary}
      - headers: {X-Present: {exact: ""}}
        path: /present
        splits:
        - {serviceNamespace: serving, serviceName: hello-2, servicePort: http}
      - path: /grpc.reflection.v1.ServerReflection/
        splits:
        - {serviceNamespace: serving, serviceName: rpc-1, servicePort: 80, percent: 50}
        - {serviceNamespace: serving, serviceName: rpc-2, servicePort: 80, percent: 50}
      - path: /stream
        splits:
        - {serviceNamespace: serving, serviceName: grpc-1, servicePort: 80, percent: 50}
        - {serviceNamespace: serving, serviceName: grpc-2, servicePort: 80, percent: 50}
      - splits:
        - serviceNamespace: serving
          serviceName: hello-1
          servicePort: 80
          percent: 70
          appendHeaders: {Knative-Serving-Revision: hello-1}
        - serviceNamespace: serving
          serviceName: hello-2
          servicePort: 80
          percent: 30
          appendHeaders: {Knative-Serving-Revision: hello-2}
        - {serviceNamespace: serving, serviceName: zero, servicePort: 80, percent: 0}
        appendHeaders: {X-Set: %s}
  - hosts: [hello.serving, hello.serving.svc, hello.serving.svc.cluster.local]
    visibility: ClusterLocal
    http:
      paths:
      - splits: [{serviceNamespace: serving, serviceName: hello-1, servicePort: 80}]
`

const knMapping = `apiVersion: networking.internal.knative.dev/v1alpha1
kind: Ingress
metadata:
  name: mapping
  namespace: serving
  annotations: {networking.knative.dev/ingress.class: portico.ingress.networking.knative.dev}
spec:
  rules:
  - hosts: [mapped.example.org]
    http:
      paths:
      - rewriteHost: hello.serving.svc.cluster.local
        splits: [{serviceNamespace: serving, serviceName: to-local, servicePort: 80}]
`

// knForeign are KIngresses of another class, of none and of an empty one.
func knForeign(name, annotations string) string {
	return fmt.Sprintf(`apiVersion: networking.internal.knative.dev/v1alpha1
kind: Ingress
metadata:
  name: %s
  namespace: serving
  annotations: {%s}
spec:
  rules:
  - hosts: [%s.example.com]
    http:
      paths:
      - splits: [{serviceNamespace: serving, serviceName: hello-1, servicePort: 80}]
`, name, annotations, name)
}

const knSecure = `apiVersion: networking.internal.knative.dev/v1alpha1
kind: Ingress
metadata:
  name: secure
  namespace: serving
  annotations: {networking.knative.dev/ingress.class: portico.ingress.networking.knative.dev}
spec:
  httpOption: Redirected
  tls: [{hosts: [secure.example.com], secretName: secure-tls, secretNamespace: serving}]
  rules:
  - hosts: [secure.example.com]
    http: {paths: [{splits: [{serviceNamespace: serving, serviceName: hello-1, servicePort: 80}]}]}
`

const knConflict = `apiVersion: networking.internal.knative.dev/v1alpha1
kind: Ingress
metadata:
  name: late
  namespace: serving
  annotations: {networking.knative.dev/ingress.class: portico.ingress.networking.knative.dev}
spec:
  rules:
  - hosts: [hello.serving.example.com]
    http:
      paths:
      - splits: [{serviceNamespace: serving, serviceName: hello-2, servicePort: 80}]
`

// readySequence watches a KIngress and records the Ready status of every
// version of it seen, with whether it had load balancers.
type readySequence struct {
	mu   sync.Mutex
	seen []string
}

func (f *knFixture) watchReady(ctx context.Context, name string) *readySequence {
	f.T.Helper()
	w, err := f.dyn.Resource(knative.IngressResource).Namespace("serving").Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name})
	if err != nil {
		f.T.Fatal(err)
	}
	s := &readySequence{}
	go func() {
		for ev := range w.ResultChan() {
			if ev.Type != watch.Added && ev.Type != watch.Modified {
				continue
			}
			ing := toKIngress(f.T, ev.Object)
			c := condition(ing, knative.ConditionReady)
			state := fmt.Sprintf("gen%d/%d:%s", ing.Generation, ing.Status.ObservedGeneration, cmp.Or(string(c.Status), "none"))
			if ing.Status.PublicLoadBalancer != nil {
				state += "+lb"
			}
			s.mu.Lock()
			if len(s.seen) == 0 || s.seen[len(s.seen)-1] != state {
				s.seen = append(s.seen, state)
			}
			s.mu.Unlock()
		}
	}()
	return s
}

func (s *readySequence) get() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.seen)
}

// TestKnativeEndToEnd serves KIngresses from a real API server with two
// Portico replicas and backends in a network namespace: the status
// sequence and probing, the class filter, every routing clause of the
// contract, DomainConflict, and a new generation.
func TestKnativeEndToEnd(t *testing.T) {
	f := newKnFixture(t)
	for _, name := range []string{"hello-1", "hello-2", "zero"} {
		f.backend(name, "http")
	}
	f.backend("grpc-1", "http2")
	f.backend("grpc-2", "h2c")
	f.grpcBackend("rpc-1", "http2")
	f.grpcBackend("rpc-2", "h2c")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, err := f.Kube.CoreV1().Services("serving").Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "serving", Name: "to-local"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "portico-internal.portico-system.svc.cluster.local",
			Ports: []corev1.ServicePort{{Name: "http", Port: 80}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	f.startReplicas(2)
	seq := f.watchReady(ctx, "hello")
	foreign := map[string]string{
		"other":   "networking.knative.dev/ingress.class: other.ingress.networking.knative.dev",
		"noclass": "",
		"empty":   `networking.knative.dev/ingress.class: ""`,
	}
	foreignVersions := map[string]string{}
	for name, ann := range foreign {
		foreignVersions[name] = f.apply(knForeign(name, ann)).GetResourceVersion()
	}
	f.apply(fmt.Sprintf(knHello, "one"))
	f.apply(knMapping)
	ing := f.waitReady("serving", "hello")
	f.waitReady("serving", "mapping")

	t.Run("status", func(t *testing.T) {
		want := knative.LoadBalancerIngressStatus{DomainInternal: "portico-external.portico-system.svc.cluster.local"}
		if lb := ing.Status.PublicLoadBalancer; lb == nil || len(lb.Ingress) != 1 || lb.Ingress[0] != want {
			t.Errorf("publicLoadBalancer = %+v, want %+v", lb, want)
		}
		want.DomainInternal = "portico-internal.portico-system.svc.cluster.local"
		if lb := ing.Status.PrivateLoadBalancer; lb == nil || len(lb.Ingress) != 1 || lb.Ingress[0] != want {
			t.Errorf("privateLoadBalancer = %+v, want %+v", lb, want)
		}
		for _, typ := range []string{knative.ConditionNetworkConfigured, knative.ConditionLoadBalancerReady} {
			if c := condition(ing, typ); c.Status != metav1.ConditionTrue {
				t.Errorf("%s = %+v", typ, c)
			}
		}
		// Probed within the grace: one write, straight to Ready, with no
		// Unknown before it (TestKnativeSlowProbe has the other case);
		// never False, and load balancers only with True.
		kubetest.WaitFor(t, 5*time.Second, "Ready sequence", func() error {
			if got := seq.get(); len(got) < 1 || got[len(got)-1] != "gen1/1:True+lb" || slices.Contains(got, "gen1/1:Unknown") {
				return fmt.Errorf("Ready sequence %v, want gen1/1:True+lb and no gen1/1:Unknown", got)
			}
			return nil
		})
		got := seq.get()
		for _, s := range got {
			if strings.Contains(s, "False") || strings.Contains(s, "+lb") && !strings.Contains(s, "True") {
				t.Errorf("Ready sequence %v has %s", got, s)
			}
		}
	})

	hash, err := knative.Hash(ing)
	if err != nil {
		t.Fatal(err)
	}
	c := &http.Client{Timeout: 20 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	ext := func(r *knReplica) string { return r.addr(f.settings.ExternalHTTPPort) }
	local := func(r *knReplica) string { return r.addr(f.settings.LocalHTTPPort) }
	host := "hello.serving.example.com"

	t.Run("probe hash on every replica", func(t *testing.T) {
		for _, r := range f.replicas {
			e := echoGet(t, c, ext(r), host, "/", http.Header{config.KnativeHashHeader: {config.KnativeHashOverride}})
			if got := e.Headers[config.KnativeHashHeader]; !slices.Equal(got, []string{hash}) {
				t.Errorf("replica %s forwarded %s %v, want the hash %s", r.ip, config.KnativeHashHeader, got, hash)
			}
			e = echoGet(t, c, ext(r), host+":80", "/", http.Header{config.KnativeHashHeader: {"other"}})
			if got := e.Headers[config.KnativeHashHeader]; !slices.Equal(got, []string{"other"}) {
				t.Errorf("a value other than override became %v", got)
			}
		}
	})

	t.Run("class filter", func(t *testing.T) {
		for name := range foreign {
			u, got := f.get("serving", name)
			if u.GetResourceVersion() != foreignVersions[name] || u.Object["status"] != nil || len(got.Status.Conditions) > 0 {
				t.Errorf("KIngress %s of another class was written: version %s (created %s), status %v", name, u.GetResourceVersion(), foreignVersions[name], u.Object["status"])
			}
			if resp, _ := do(t, c, "GET", ext(f.replicas[0]), name+".example.com", "/", nil); resp.StatusCode != http.StatusNotFound {
				t.Errorf("host of KIngress %s of another class: status %d, want 404", name, resp.StatusCode)
			}
		}
	})

	t.Run("splits", func(t *testing.T) {
		counts := map[string]int{}
		for i := range 1000 {
			r := f.replicas[i%2]
			e := echoGet(t, c, ext(r), host, "/split", http.Header{"X-Set": {"from-client", "again"}})
			counts[e.Backend]++
			if !slices.Equal(e.Headers["X-Set"], []string{"one"}) {
				t.Fatalf("path appendHeaders must set X-Set: got %v", e.Headers["X-Set"])
			}
			if want := []string{e.Backend}; !slices.Equal(e.Headers["Knative-Serving-Revision"], want) {
				t.Fatalf("split appendHeaders: got %v, want %v", e.Headers["Knative-Serving-Revision"], want)
			}
		}
		if counts["zero"] != 0 || f.backends["zero"].hits.Load() != 0 {
			t.Errorf("the 0%% split got %d requests", counts["zero"])
		}
		if n := counts["hello-1"]; n < 600 || n > 800 {
			t.Errorf("70%% split got %d of 1,000 (%v)", n, counts)
		}
		if n := counts["hello-2"]; n < 200 || n > 400 {
			t.Errorf("30%% split got %d of 1,000 (%v)", n, counts)
		}
	})

	t.Run("paths and headers in order", func(t *testing.T) {
		r := f.replicas[0]
		e := echoGet(t, c, ext(r), host, "/x", http.Header{"Knative-Serving-Tag": {"canary"}})
		if e.Backend != "hello-2" {
			t.Errorf("tag header: backend %s, want hello-2", e.Backend)
		}
		e = echoGet(t, c, ext(r), host, "/presentation", http.Header{"X-Present": {""}})
		if e.Backend != "hello-2" {
			t.Errorf("literal prefix /present with the header present: backend %s, want hello-2", e.Backend)
		}
		// Without the header the path falls through to the splits, whose
		// appendHeaders name the revision.
		if e := echoGet(t, c, ext(r), host, "/presentation", nil); len(e.Headers["Knative-Serving-Revision"]) != 1 {
			t.Errorf("without the header /present must not match: %+v", e)
		}
	})

	t.Run("cluster-local", func(t *testing.T) {
		r := f.replicas[1]
		for _, h := range []string{"hello.serving", "hello.serving.svc.cluster.local"} {
			if resp, _ := do(t, c, "GET", ext(r), h, "/", nil); resp.StatusCode != http.StatusNotFound {
				t.Errorf("cluster-local host %s on the external gateway: %d, want 404", h, resp.StatusCode)
			}
			if e := echoGet(t, c, local(r), h, "/", nil); e.Backend != "hello-1" {
				t.Errorf("cluster-local host %s: backend %s", h, e.Backend)
			}
		}
		// External hosts are reachable through the cluster-local gateway.
		echoGet(t, c, local(r), host, "/", nil)
	})

	t.Run("ExternalName of the cluster-local Service", func(t *testing.T) {
		e := echoGet(t, c, ext(f.replicas[0]), "mapped.example.org", "/m?q=1", nil)
		if e.Backend != "hello-1" || e.Host != "hello.serving.svc.cluster.local" || e.Path != "/m?q=1" {
			t.Errorf("mapping: %+v, want hello-1 with Host hello.serving.svc.cluster.local", e)
		}
	})

	t.Run("503 not retried", func(t *testing.T) {
		b1, b2 := f.backends["hello-1"].hits.Load(), f.backends["hello-2"].hits.Load()
		resp, _ := do(t, c, "GET", ext(f.replicas[0]), host, "/503", nil)
		if resp.StatusCode != http.StatusServiceUnavailable {
			t.Errorf("status %d, want the backend's 503", resp.StatusCode)
		}
		if n := f.backends["hello-1"].hits.Load() - b1 + f.backends["hello-2"].hits.Load() - b2; n != 1 {
			t.Errorf("backends got %d requests, want 1", n)
		}
	})

	t.Run("WebSocket and bidirectional streams through splits", func(t *testing.T) {
		seen := map[string]bool{}
		for range 20 {
			seen[knWebSocket(t, ext(f.replicas[0]), host)] = true
		}
		if !seen["hello-1"] || !seen["hello-2"] {
			t.Errorf("WebSockets reached %v, want both splits", seen)
		}
		seen = map[string]bool{}
		for range 20 {
			seen[bidiStream(t, ext(f.replicas[1]), host)] = true
		}
		if !seen["grpc-1"] || !seen["grpc-2"] {
			t.Errorf("streams reached %v, want both h2c splits (port names http2 and h2c)", seen)
		}
		seen = map[string]bool{}
		for i := range 20 {
			seen[grpcBidi(t, ext(f.replicas[i%2]), host)] = true
		}
		if !seen["rpc-1"] || !seen["rpc-2"] {
			t.Errorf("gRPC streams reached %v, want both splits", seen)
		}
	})

	t.Run("10 s backend delay not cut", func(t *testing.T) {
		start := time.Now()
		e := echoGet(t, c, ext(f.replicas[0]), host, "/delay?d=10s", nil)
		if took := time.Since(start); took < 10*time.Second || e.Path != "/delay?d=10s" {
			t.Errorf("answered after %v: %+v", took, e)
		}
	})

	t.Run("DomainConflict", func(t *testing.T) {
		f.apply(knConflict)
		kubetest.WaitFor(t, 20*time.Second, "DomainConflict", func() error {
			_, late := f.get("serving", "late")
			lb := condition(late, knative.ConditionLoadBalancerReady)
			if lb.Status != metav1.ConditionFalse || lb.Reason != "DomainConflict" || condition(late, knative.ConditionReady).Status != metav1.ConditionFalse {
				return fmt.Errorf("LoadBalancerReady %+v", lb)
			}
			return nil
		})
		// The first owner keeps the host.
		if e := echoGet(t, c, ext(f.replicas[0]), host, "/", http.Header{"Knative-Serving-Tag": {"canary"}}); e.Headers["Knative-Serving-Tag"] == nil {
			t.Errorf("host taken over by the later KIngress: %+v", e)
		}
		if condition(f.waitReady("serving", "hello"), knative.ConditionReady).Status != metav1.ConditionTrue {
			t.Error("the owner lost Ready")
		}
	})

	t.Run("new generation", func(t *testing.T) {
		f.apply(fmt.Sprintf(knHello, "two"))
		ing := f.waitReady("serving", "hello")
		if ing.Generation != 2 {
			t.Fatalf("generation %d", ing.Generation)
		}
		hash2, _ := knative.Hash(ing)
		// The first request after Ready sees the new version on every
		// replica.
		for _, r := range f.replicas {
			e := echoGet(t, c, ext(r), host, "/split", http.Header{config.KnativeHashHeader: {config.KnativeHashOverride}})
			if !slices.Equal(e.Headers["X-Set"], []string{"two"}) || !slices.Equal(e.Headers[config.KnativeHashHeader], []string{hash2}) {
				t.Errorf("replica %s after Ready: X-Set %v, hash %v (want two, %s)", r.ip, e.Headers["X-Set"], e.Headers[config.KnativeHashHeader], hash2)
			}
		}
		// The watch may lag behind the read above.
		kubetest.WaitFor(t, 5*time.Second, "Ready sequence of generation 2", func() error {
			got := seq.get()
			if got[len(got)-1] != "gen2/2:True+lb" || slices.Contains(got, "gen2/2:False") || slices.Contains(got, "gen2/2:Unknown") {
				return fmt.Errorf("Ready sequence %v, want it to end with gen2/2:True+lb, written once", got)
			}
			return nil
		})
	})

	t.Run("TLS by SNI and Redirected", func(t *testing.T) {
		ca, err := snitest.NewCA()
		if err != nil {
			t.Fatal(err)
		}
		cert, err := ca.Issue(snitest.ECDSA, 2, "secure.example.com")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.Kube.CoreV1().Secrets("serving").Create(ctx, kubetest.TLSSecret("serving", "secure-tls", cert.CertPEM, cert.KeyPEM), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		f.apply(knSecure)
		f.waitReady("serving", "secure")
		tc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool, ServerName: "secure.example.com"}}}
		for _, r := range f.replicas {
			resp, _ := do(t, c, http.MethodGet, ext(r), "secure.example.com", "/p?q=1", nil)
			if resp.StatusCode != http.StatusMovedPermanently || resp.Header.Get("Location") != "https://secure.example.com/p?q=1" {
				t.Errorf("plain HTTP of a Redirected host: %d %s", resp.StatusCode, resp.Header.Get("Location"))
			}
			if e := echoGet(t, tc, r.addr(f.settings.ExternalHTTPSPort), "secure.example.com", "/p", nil); e.Backend != "hello-1" {
				t.Errorf("HTTPS: %+v", e)
			}
		}
	})

	t.Run("missing backend: NetworkConfigured=False, then Ready once it exists", func(t *testing.T) {
		f.apply(strings.ReplaceAll(knForeign("later", "networking.knative.dev/ingress.class: portico.ingress.networking.knative.dev"), "hello-1", "later-svc"))
		kubetest.WaitFor(t, 20*time.Second, "NetworkConfigured=False", func() error {
			_, ing := f.get("serving", "later")
			c := condition(ing, knative.ConditionNetworkConfigured)
			if c.Status != metav1.ConditionFalse || !strings.Contains(c.Message, "Service serving/later-svc not found") ||
				condition(ing, knative.ConditionReady).Status != metav1.ConditionFalse {
				return fmt.Errorf("NetworkConfigured %+v", c)
			}
			return nil
		})
		f.backend("later-svc", "http")
		f.waitReady("serving", "later")
		if e := echoGet(t, c, ext(f.replicas[0]), "later.example.com", "/", nil); e.Backend != "later-svc" {
			t.Errorf("served by %s", e.Backend)
		}
	})

	t.Run("owner deleted: the conflicting KIngress takes the host", func(t *testing.T) {
		if err := f.dyn.Resource(knative.IngressResource).Namespace("serving").Delete(ctx, "hello", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		f.waitReady("serving", "late")
		for _, r := range f.replicas {
			if e := echoGet(t, c, ext(r), host, "/", nil); e.Backend != "hello-2" {
				t.Errorf("replica %s: backend %s, want the new owner's hello-2", r.ip, e.Backend)
			}
		}
	})
}
