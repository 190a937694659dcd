package translate

import (
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"

	"portico.dev/portico/config"
	"portico.dev/portico/internal/controlplane/knative"
	"portico.dev/portico/internal/controlplane/snapshot"
	"portico.dev/portico/internal/controlplane/wellknown"
)

var knSettings = &KnativeSettings{ExternalHTTPPort: 8080, ExternalHTTPSPort: 8443, LocalHTTPPort: 8081, LocalHTTPSPort: 8444,
	LocalService: types.NamespacedName{Namespace: "portico-system", Name: "portico-internal"}}

func kingress(t *testing.T, name string, age int, doc string) *knative.Ingress {
	t.Helper()
	ing := &knative.Ingress{}
	if err := yaml.UnmarshalStrict([]byte(doc), &ing.Spec); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	ing.Namespace, ing.Name, ing.Generation = "ns", name, 1
	ing.CreationTimestamp = metav1.NewTime(time.Date(2025, 1, 1, 0, age, 0, 0, time.UTC))
	ing.Annotations = map[string]string{knative.IngressClassAnnotation: knative.DefaultIngressClass}
	return ing
}

func knService(name string, ports ...corev1.ServicePort) *corev1.Service {
	return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}, Spec: corev1.ServiceSpec{Ports: ports}}
}

// knRoute matches a request on one of the Knative ports.
func knRoute(t *testing.T, cfg *config.Config, port int32, host, path string, header http.Header) *config.Rule {
	t.Helper()
	for _, p := range cfg.Ports {
		if p.Number != port {
			continue
		}
		r := httptest.NewRequest(http.MethodGet, "http://"+host+path, nil)
		for k, v := range header {
			r.Header[k] = v
		}
		l, ok := p.Listeners.Lookup(host)
		if !ok {
			return nil
		}
		rule, _ := l.Routes.Match(r)
		return rule
	}
	t.Fatalf("no port %d", port)
	return nil
}

func TestKnativeRoutes(t *testing.T) {
	tlsCert := newTestCert(t, "a.example.com")
	res := &snapshot.Resources{
		Services: []*corev1.Service{
			knService("one", corev1.ServicePort{Name: "http", Port: 80}),
			knService("two", corev1.ServicePort{Name: "http2", Port: 81}),
			{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "local"}, Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName,
				ExternalName: "portico-internal.portico-system.svc.cluster.local."}},
			{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "far"}, Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName,
				ExternalName: "example.net"}},
		},
		Secrets: []*corev1.Secret{{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "cert"}, Type: corev1.SecretTypeTLS,
			Data: map[string][]byte{corev1.TLSCertKey: []byte(tlsCert.certPEM), corev1.TLSPrivateKeyKey: []byte(tlsCert.keyPEM)}}},
		KIngresses: []*knative.Ingress{
			kingress(t, "a", 0, `
tls: [{hosts: [a.example.com], secretName: cert}]
httpOption: Redirected
rules:
- hosts: [A.example.com]
  http:
    paths:
    - {path: /foo, splits: [{serviceName: two, servicePort: http2}]}
    - {headers: {X-H: {exact: ""}}, splits: [{serviceName: two, servicePort: 81}]}
    - {splits: [{serviceName: one, servicePort: 80, percent: 0}, {serviceName: two, servicePort: 81, percent: 100}]}
- hosts: [a.ns.svc.cluster.local]
  visibility: ClusterLocal
  http:
    paths:
    - splits: [{serviceName: local, servicePort: 80}]
    - splits: [{serviceName: far, servicePort: 8080}]
`),
			kingress(t, "b", 1, `
rules:
- hosts: [a.ns.svc.cluster.local, b.example.com]
  visibility: ClusterLocal
  http: {paths: [{splits: [{serviceName: one, servicePort: 80}]}]}
`),
			kingress(t, "c", 2, `
tls: [{hosts: [c.example.com], secretName: missing}]
rules:
- hosts: [c.example.com]
  http: {paths: [{path: /x, splits: [{serviceName: nothing, servicePort: 80}, {serviceName: one, servicePort: nope}]}]}
`),
		},
	}
	foreign := kingress(t, "foreign", 3, `{rules: [{hosts: [f.example.com], http: {paths: [{splits: [{serviceName: one, servicePort: 80}]}]}}]}`)
	foreign.Annotations = map[string]string{knative.IngressClassAnnotation: "other"}
	res.KIngresses = append(res.KIngresses, foreign)

	out, mem := Translate(Settings{Knative: knSettings}, res, Memory{})
	if out.Knative.Ingresses.Len() != 3 {
		t.Fatalf("results for %v, want a, b and c only", out.Knative.Ingresses)
	}
	a := out.Knative.Ingresses.At(nn("ns", "a"))
	if !slices.Equal(a.External, []string{"a.example.com"}) || !slices.Equal(a.Local, []string{"a.ns.svc.cluster.local"}) || a.Conflict != "" || len(a.Problems) > 0 {
		t.Errorf("a: %+v", a)
	}
	if want, _ := knative.Hash(res.KIngresses[0]); a.Hash != want {
		t.Errorf("a's hash %s, want %s", a.Hash, want)
	}
	if b := out.Knative.Ingresses.At(nn("ns", "b")); !strings.Contains(b.Conflict, "a.ns.svc.cluster.local") || !strings.Contains(b.Conflict, "ns/a") || b.External != nil || b.Local != nil {
		t.Errorf("b: %+v, want a DomainConflict on a.ns.svc.cluster.local with ns/a", b)
	}
	c := out.Knative.Ingresses.At(nn("ns", "c"))
	wantProblems := []string{"Secret ns/missing: does not exist", "Service ns/nothing not found", "Service ns/one has no port nope"}
	if !slices.Equal(c.Problems, wantProblems) {
		t.Errorf("c's problems %q, want %q", c.Problems, wantProblems)
	}
	cfg := out.Config

	// Ports: external plain and TLS, cluster-local plain; no cluster-local
	// TLS without a certificate for a cluster-local host.
	var ports []int32
	for _, p := range cfg.Ports {
		ports = append(ports, p.Number)
	}
	slices.Sort(ports)
	if !slices.Equal(ports, []int32{8080, 8081, 8443}) {
		t.Errorf("ports %v", ports)
	}

	// Redirected: plain HTTP of a host with a certificate is answered 301.
	if r := knRoute(t, cfg, 8080, "a.example.com", "/foo", nil); r == nil || len(r.Filters) != 1 || r.Filters[0].Redirect == nil || r.Filters[0].Redirect.StatusCode != 301 {
		t.Errorf("plain HTTP of a Redirected host: %+v", r)
	}
	// First match wins; a literal prefix; header present.
	for _, c := range []struct {
		path   string
		header http.Header
		index  int
	}{
		{"/foobar", nil, 0},
		{"/fo", http.Header{"X-H": {""}}, 1},
		{"/fo", nil, 2},
		{"/foo", http.Header{"X-H": {"v"}}, 0},
	} {
		r := knRoute(t, cfg, 8443, "a.example.com", c.path, c.header)
		if r == nil || r.Index != c.index || r.NetworkHash != a.Hash {
			t.Errorf("%s %v: rule %+v, want path %d", c.path, c.header, r, c.index)
		}
	}
	r := knRoute(t, cfg, 8443, "a.example.com", "/foo", nil)
	if b := r.Backends[0]; b.AppProtocol != "kubernetes.io/h2c" || b.Key.Port != 81 {
		t.Errorf("port named http2: %+v", b)
	}
	r = knRoute(t, cfg, 8443, "a.example.com", "/", nil)
	if r.TotalWeight != 100 || r.Backends[0].Weight != 0 {
		t.Errorf("0%% split: %+v", r.Backends)
	}
	// Cluster-local hosts are not served on the external gateway.
	if r := knRoute(t, cfg, 8080, "a.ns.svc.cluster.local", "/", nil); r != nil {
		t.Errorf("cluster-local host on the external gateway: %+v", r)
	}
	r = knRoute(t, cfg, 8081, "a.ns.svc.cluster.local", "/", nil)
	if r == nil || r.Backends[0].Dispatch != 8081 {
		t.Errorf("ExternalName of the cluster-local Service: %+v", r)
	}
	// The probe of the leader is caught on every path.
	r = knRoute(t, cfg, 8080, "a.example.com", "/anything", http.Header{config.KnativeProbeHeader: {config.KnativePorticoProbe}, config.KnativeHashHeader: {config.KnativeHashOverride}})
	if r == nil || r.Name != "probe" || r.NetworkHash != a.Hash {
		t.Errorf("probe: %+v", r)
	}

	// A changed object is hashed again; the others keep theirs.
	res2 := *res
	res2.KIngresses = slices.Clone(res.KIngresses)
	changed := *res.KIngresses[0]
	changed.Spec.HTTPOption = knative.HTTPOptionEnabled
	res2.KIngresses[0] = &changed
	out2, _ := Translate(Settings{Knative: knSettings}, &res2, mem)
	if out2.Knative.Ingresses.At(nn("ns", "a")).Hash == a.Hash || out2.Knative.Ingresses.At(nn("ns", "c")).Hash != c.Hash {
		t.Error("hash not recomputed for the changed KIngress only")
	}
	if r := knRoute(t, out2.Config, 8080, "a.example.com", "/foo", nil); r == nil || r.Index != 0 || len(r.Backends) != 1 {
		t.Errorf("Enabled: plain HTTP must be served, got %+v", r)
	}
}

func TestKnativeCertificates(t *testing.T) {
	issued := newTestCert(t, "ok.example.com")
	cert := func(name, class string, names ...string) *knative.Certificate {
		return &knative.Certificate{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, Generation: 3,
			Annotations: map[string]string{knative.CertificateClassAnnotation: class}},
			Spec: knative.CertificateSpec{DNSNames: names, SecretName: name + "-tls"}}
	}
	ours := knative.DefaultCertificateClass
	res := &snapshot.Resources{
		KCertificates: []*knative.Certificate{
			cert("ok", ours, "OK.example.com"), cert("failing", ours, "failing.example.com"), cert("waiting", ours, "waiting.example.com"),
			cert("two", ours, "a.example.com", "b.example.com"), cert("none", ours), cert("foreign", "other", "f.example.com"),
		},
		Secrets: []*corev1.Secret{{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "ok-tls",
			Annotations: map[string]string{wellknown.ACMEHostnameAnnotation: "ok.example.com"}}, Type: corev1.SecretTypeTLS,
			Data: map[string][]byte{corev1.TLSCertKey: []byte(issued.certPEM), corev1.TLSPrivateKeyKey: []byte(issued.keyPEM)}}},
		ACMEErrors: map[string]string{"failing.example.com": "rate limited"},
	}
	out, _ := Translate(Settings{Knative: knSettings}, res, Memory{})
	var wanted []string
	for _, c := range out.ACME {
		wanted = append(wanted, c.Hostname+" "+c.Secret.String())
	}
	if want := []string{"failing.example.com ns/failing-tls", "ok.example.com ns/ok-tls", "waiting.example.com ns/waiting-tls"}; !slices.Equal(wanted, want) {
		t.Errorf("ACME wants %q, want %q", wanted, want)
	}
	got := out.Knative.Certificates
	if len(got) != 5 {
		t.Errorf("results for %d Certificates, want 5 (not the foreign one)", len(got))
	}
	for name, want := range map[string]struct {
		ready  metav1.ConditionStatus
		reason string
	}{
		"ok": {metav1.ConditionTrue, ""}, "failing": {metav1.ConditionFalse, "IssuanceFailed"}, "waiting": {metav1.ConditionUnknown, "Issuing"},
		"two": {metav1.ConditionFalse, "UnsupportedSpec"}, "none": {metav1.ConditionFalse, "InvalidSpec"},
	} {
		if r := got[nn("ns", name)]; r.Ready != want.ready || r.Reason != want.reason || r.Generation != 3 {
			t.Errorf("%s: %+v, want %s %s", name, r, want.ready, want.reason)
		}
	}
	if r := got[nn("ns", "ok")]; r.NotAfter == nil || r.NotAfter.After(time.Now().Add(25*time.Hour)) {
		t.Errorf("ok: notAfter %v", r.NotAfter)
	}
	if !strings.Contains(got[nn("ns", "failing")].Message, "rate limited") {
		t.Errorf("failing: %+v", got[nn("ns", "failing")])
	}
}

// TestKnativeHostInTwoRules serves the paths of both rules that name a
// host, in order, on plain HTTP and on TLS.
func TestKnativeHostInTwoRules(t *testing.T) {
	res := &snapshot.Resources{
		Services: []*corev1.Service{knService("one", corev1.ServicePort{Name: "http", Port: 80})},
		KIngresses: []*knative.Ingress{kingress(t, "a", 0, `
rules:
- hosts: [a.example.com]
  http: {paths: [{path: /a, splits: [{serviceName: one, servicePort: 80}]}]}
- hosts: [a.example.com]
  http: {paths: [{path: /b, splits: [{serviceName: one, servicePort: 80}]}]}
`)},
	}
	out, _ := Translate(Settings{Knative: knSettings}, res, Memory{})
	for _, port := range []int32{8080, 8443} {
		for _, path := range []string{"/a", "/b"} {
			if r := knRoute(t, out.Config, port, "a.example.com", path, nil); r == nil {
				t.Errorf("port %d: %s not served", port, path)
			}
		}
	}
}
