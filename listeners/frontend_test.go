package listeners

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"math/big"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
)

func testCA(t *testing.T, name string) *x509.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func caRef(ns, name, kind string) gwv1.ObjectReference {
	ref := gwv1.ObjectReference{Kind: gwv1.Kind(kind), Name: gwv1.ObjectName(name)}
	if ns != "" {
		n := gwv1.Namespace(ns)
		ref.Namespace = &n
	}
	return ref
}

// TestFrontendValidation covers spec.tls.frontend: the default applies to
// every HTTPS port without a perPort entry, ListenerSet listeners
// included; a port whose references partly fail has ResolvedRefs False
// and validates with what resolved; a port where none resolves is not
// accepted; HTTP listeners are left alone; AllowInsecureFallback is
// flagged on the Gateway.
func TestFrontendValidation(t *testing.T) {
	cas := map[string]*x509.Certificate{"infra/default": testCA(t, "default"), "infra/port-8443": testCA(t, "port"), "shared/ca": testCA(t, "shared")}
	lookup := func(ns, name string) ([]*x509.Certificate, error) {
		if c, ok := cas[ns+"/"+name]; ok {
			return []*x509.Certificate{c}, nil
		}
		return nil, errors.New("not found")
	}
	https := func(name string, port gwv1.PortNumber, host string) gwv1.Listener {
		l := httpsListener(name, host, "cert")
		l.Port = port
		return l
	}
	gw := newGateway("infra", "gw", gwv1.NamespacesFromAll,
		https("default", 443, ""),
		https("per-port", 8443, ""),
		https("partly", 9443, ""),
		https("broken", 10443, ""),
		https("grant", 11443, ""),
		httpListener("http", "", 80),
	)
	insecure := gwv1.AllowInsecureFallback
	gw.Spec.TLS = &gwv1.GatewayTLSConfig{Frontend: &gwv1.FrontendTLSConfig{
		Default: gwv1.TLSConfig{Validation: &gwv1.FrontendTLSValidation{CACertificateRefs: []gwv1.ObjectReference{caRef("", "default", "ConfigMap")}}},
		PerPort: []gwv1.TLSPortConfig{
			{Port: 8443, TLS: gwv1.TLSConfig{Validation: &gwv1.FrontendTLSValidation{
				CACertificateRefs: []gwv1.ObjectReference{caRef("", "port-8443", "ConfigMap")}, Mode: insecure}}},
			{Port: 9443, TLS: gwv1.TLSConfig{Validation: &gwv1.FrontendTLSValidation{
				CACertificateRefs: []gwv1.ObjectReference{caRef("", "default", "ConfigMap"), caRef("", "missing", "ConfigMap")}}}},
			{Port: 10443, TLS: gwv1.TLSConfig{Validation: &gwv1.FrontendTLSValidation{
				CACertificateRefs: []gwv1.ObjectReference{caRef("", "default", "Secret"), caRef("shared", "ca", "ConfigMap")}}}},
			{Port: 11443, TLS: gwv1.TLSConfig{Validation: &gwv1.FrontendTLSValidation{
				CACertificateRefs: []gwv1.ObjectReference{caRef("shared", "ca", "ConfigMap")}}}},
		},
	}}
	ls := newListenerSet("infra", "ls", epoch, gw, entry(https("ls", 443, "ls.example.com")))
	in := Input{Gateway: gw, ClassAccepted: true, ListenerSets: []*gwv1.ListenerSet{ls}, Certificates: allCertificates, CACertificates: lookup}
	in.ReferenceGrants = []*gwv1.ReferenceGrant{{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shared", Name: "g"},
		Spec: gwv1.ReferenceGrantSpec{
			From: []gwv1.ReferenceGrantFrom{{Group: gwv1.GroupName, Kind: "Gateway", Namespace: "infra"}},
			To:   []gwv1.ReferenceGrantTo{{Group: "", Kind: "ConfigMap"}},
		},
	}}
	res := run(t, in)

	conds := func(name string) []metav1.Condition {
		for _, l := range res.Gateway.Listeners {
			if string(l.Name) == name {
				return l.Conditions
			}
		}
		t.Fatalf("no listener %s", name)
		return nil
	}
	byName := map[string]*Listener{}
	for i := range res.Listeners {
		byName[string(res.Listeners[i].Name)] = &res.Listeners[i]
	}
	validates := func(name string, ca *x509.Certificate, optional bool) {
		t.Helper()
		v := byName[name].ClientValidation
		if v == nil || v.Optional != optional {
			t.Errorf("%s: validation %+v, want one (optional %v)", name, v, optional)
			return
		}
		if ca != nil && !v.CAs.Equal(poolOf(ca)) {
			t.Errorf("%s: validates against other CAs", name)
		}
	}

	for _, name := range []string{"default", "per-port", "grant", "http"} {
		for _, w := range acceptedListener {
			w.check(t, name, conds(name))
		}
	}
	validates("default", cas["infra/default"], false)
	validates("ls", cas["infra/default"], false)
	validates("per-port", cas["infra/port-8443"], true)
	validates("grant", cas["shared/ca"], false)
	if v := byName["http"].ClientValidation; v != nil {
		t.Errorf("HTTP listener validates client certificates: %+v", v)
	}

	want{"ResolvedRefs", metav1.ConditionFalse, "InvalidCACertificateRef"}.check(t, "partly", conds("partly"))
	want{"Accepted", metav1.ConditionTrue, "Accepted"}.check(t, "partly", conds("partly"))
	validates("partly", cas["infra/default"], false)

	// Kind Secret is not supported, and shared/ca needs a grant for port
	// 10443 too (it has one): the kind is what fails.
	want{"ResolvedRefs", metav1.ConditionFalse, "InvalidCACertificateKind"}.check(t, "broken", conds("broken"))
	validates("broken", cas["shared/ca"], false)

	// Without the grant, port 11443 has nothing valid: not accepted.
	in.ReferenceGrants = nil
	res = run(t, in)
	want{"Accepted", metav1.ConditionFalse, "NoValidCACertificate"}.check(t, "grant without grant", conds("grant"))
	want{"ResolvedRefs", metav1.ConditionFalse, "RefNotPermitted"}.check(t, "grant without grant", conds("grant"))
	want{"Programmed", metav1.ConditionFalse, ""}.check(t, "grant without grant", conds("grant"))
	for _, l := range res.Listeners {
		if l.Name == "grant" && l.Serves() {
			t.Error("a listener without a usable CA certificate serves")
		}
	}

	want{"InsecureFrontendValidationMode", metav1.ConditionTrue, "ConfigurationChanged"}.check(t, "Gateway", res.Gateway.Conditions)
	gw.Spec.TLS.Frontend.PerPort[0].TLS.Validation.Mode = gwv1.AllowValidOnly
	res = run(t, in)
	if c := findCond(res.Gateway.Conditions, "InsecureFrontendValidationMode"); c.Type != "" {
		t.Errorf("InsecureFrontendValidationMode still there without an insecure port: %+v", c)
	}
}

func poolOf(certs ...*x509.Certificate) *x509.CertPool {
	p := x509.NewCertPool()
	for _, c := range certs {
		p.AddCert(c)
	}
	return p
}
