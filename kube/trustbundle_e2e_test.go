package kube

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	certv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"portico.dev/portico/internal/controlplane/wellknown"
	"portico.dev/portico/internal/testkit/freeport"
	"portico.dev/portico/internal/testkit/kubetest"
	"portico.dev/portico/internal/testkit/snitest"
)

// TestClusterTrustBundleRotation drives ClusterTrustBundles through a real
// API server, which serves certificates.k8s.io/v1 by default: a
// BackendTLSPolicy and a Gateway's client certificate validation name
// bundles that do not exist yet (unresolved, in their statuses, and the
// backend answers 500); once created, then rotated, the new CAs reach the
// data plane without a restart: the backend, first of an untrusted CA
// (502), is served after its CA enters the bundle, and a client
// certificate is accepted once its CA is added, while one of a CA taken
// out of the bundle is refused from then on.
func TestClusterTrustBundleRotation(t *testing.T) {
	f := newClusterFixture(t)
	ctx := t.Context()
	gws := f.Gateway.GatewayV1()
	bundles := f.Kube.CertificatesV1().ClusterTrustBundles()
	f.Namespace("portico-system", nil)
	f.Namespace("apps", nil)

	newCA := func() *snitest.CA {
		ca, err := snitest.NewCA()
		if err != nil {
			t.Fatal(err)
		}
		return ca
	}
	backendCA, otherCA, clientCA, strangerCA := newCA(), newCA(), newCA(), newCA()
	f.Service("apps", "secure", f.tlsBackendInNetns(backendCA, "backend.internal"))
	clientCert := issueClientCert(t, clientCA, 1, "client")
	strangerCert := issueClientCert(t, strangerCA, 2, "stranger")
	server := newTestCert(t, "app.example.com")
	mustCreate(t)(f.Kube.CoreV1().Secrets("apps").Create(ctx, tlsSecret("apps", "cert", server), metav1.CreateOptions{}))

	httpPort, httpsPort := int32(freeport.Port(t)), int32(freeport.Port(t))
	bundleRef := func(name string) gwv1.ObjectReference {
		return gwv1.ObjectReference{Group: "certificates.k8s.io", Kind: "ClusterTrustBundle", Name: gwv1.ObjectName(name)}
	}
	mustCreate(t)(gws.GatewayClasses().Create(ctx, &gwv1.GatewayClass{
		ObjectMeta: metav1.ObjectMeta{Name: "portico"},
		Spec:       gwv1.GatewayClassSpec{ControllerName: wellknown.ControllerName},
	}, metav1.CreateOptions{}))
	mustCreate(t)(gws.Gateways("apps").Create(ctx, &gwv1.Gateway{
		ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "gw"},
		Spec: gwv1.GatewaySpec{
			GatewayClassName: "portico",
			TLS: &gwv1.GatewayTLSConfig{Frontend: &gwv1.FrontendTLSConfig{Default: gwv1.TLSConfig{
				Validation: &gwv1.FrontendTLSValidation{CACertificateRefs: []gwv1.ObjectReference{bundleRef("clients")}},
			}}},
			Listeners: []gwv1.Listener{
				{Name: "http", Port: gwv1.PortNumber(httpPort), Protocol: gwv1.HTTPProtocolType},
				{Name: "https", Port: gwv1.PortNumber(httpsPort), Protocol: gwv1.HTTPSProtocolType,
					TLS: &gwv1.ListenerTLSConfig{CertificateRefs: []gwv1.SecretObjectReference{{Name: "cert"}}}},
			},
		},
	}, metav1.CreateOptions{}))
	mustCreate(t)(gws.BackendTLSPolicies("apps").Create(ctx, &gwv1.BackendTLSPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "tls"},
		Spec: gwv1.BackendTLSPolicySpec{
			TargetRefs: []gwv1.LocalPolicyTargetReferenceWithSectionName{{LocalPolicyTargetReference: gwv1.LocalPolicyTargetReference{Kind: "Service", Name: "secure"}}},
			Validation: gwv1.BackendTLSPolicyValidation{
				CACertificateRefs: []gwv1.LocalObjectReference{{Group: "certificates.k8s.io", Kind: "ClusterTrustBundle", Name: "backends"}},
				Hostname:          "backend.internal",
			},
		},
	}, metav1.CreateOptions{}))
	mustCreate(t)(gws.HTTPRoutes("apps").Create(ctx, &gwv1.HTTPRoute{
		ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "r"},
		Spec: gwv1.HTTPRouteSpec{
			CommonRouteSpec: gwv1.CommonRouteSpec{ParentRefs: []gwv1.ParentReference{{Name: "gw"}}},
			Rules:           []gwv1.HTTPRouteRule{{BackendRefs: []gwv1.HTTPBackendRef{backendRef("secure")}}},
		},
	}, metav1.CreateOptions{}))

	p := f.startPortico(f.Env.Config, "127.0.0.1", "portico-a", nil)
	plain := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, p.addr(httpPort))
		},
	}}
	url := "http://app.example.com/"

	// Neither bundle exists: both references are unresolved.
	policyIs := func(status metav1.ConditionStatus, reason, msg string) func() error {
		return func() error {
			pol, err := gws.BackendTLSPolicies("apps").Get(ctx, "tls", metav1.GetOptions{})
			if err != nil {
				return err
			}
			if len(pol.Status.Ancestors) != 1 {
				return fmt.Errorf("ancestors %+v", pol.Status.Ancestors)
			}
			c := meta.FindStatusCondition(pol.Status.Ancestors[0].Conditions, "ResolvedRefs")
			if c == nil || c.Status != status || c.Reason != reason || !strings.Contains(c.Message, msg) {
				return fmt.Errorf("ResolvedRefs %+v, want %s %s with %q", c, status, reason, msg)
			}
			return nil
		}
	}
	listenerIs := func(status metav1.ConditionStatus, reason string) func() error {
		return func() error {
			gw, err := gws.Gateways("apps").Get(ctx, "gw", metav1.GetOptions{})
			if err != nil {
				return err
			}
			for _, l := range gw.Status.Listeners {
				if l.Name == "https" {
					return conditionIs(l.Conditions, "ResolvedRefs", status, reason, gw.Generation)
				}
			}
			return fmt.Errorf("no status of listener https: %+v", gw.Status.Listeners)
		}
	}
	kubetest.WaitFor(t, 15*time.Second, "policy unresolved", policyIs(metav1.ConditionFalse, "InvalidCACertificateRef", `ClusterTrustBundle "backends"`))
	kubetest.WaitFor(t, 15*time.Second, "listener unresolved", listenerIs(metav1.ConditionFalse, "InvalidCACertificateRef"))
	if code, _, err := fetch(plain, url); code != http.StatusInternalServerError {
		t.Errorf("backend with no usable CA: %d %v, want 500", code, err)
	}

	// The backends bundle arrives, trusting another CA than the backend's.
	setBundle := func(name string, cas ...*snitest.CA) {
		t.Helper()
		var pem []string
		for _, ca := range cas {
			pem = append(pem, string(ca.CertPEM))
		}
		b, err := bundles.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			b = &certv1.ClusterTrustBundle{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: certv1.ClusterTrustBundleSpec{TrustBundle: strings.Join(pem, "")}}
			mustCreate(t)(bundles.Create(ctx, b, metav1.CreateOptions{}))
			return
		}
		b.Spec.TrustBundle = strings.Join(pem, "")
		if _, err := bundles.Update(ctx, b, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	setBundle("backends", otherCA)
	kubetest.WaitFor(t, 15*time.Second, "policy resolved", policyIs(metav1.ConditionTrue, "ResolvedRefs", ""))
	kubetest.WaitFor(t, 15*time.Second, "backend refused", func() error {
		if code, _, err := fetch(plain, url); code != http.StatusBadGateway {
			return fmt.Errorf("backend of an untrusted CA: %d %v, want 502", code, err)
		}
		return nil
	})
	// Rotated: the backend's CA is in the bundle now.
	setBundle("backends", otherCA, backendCA)
	kubetest.WaitFor(t, 15*time.Second, "backend served after the rotation", expectServed(plain, url, 200, "tls-backend"))

	// Client certificates: the clients bundle trusts the stranger's CA
	// first, then the client's only.
	https := func(cert *tls.Certificate) error {
		roots := x509.NewCertPool()
		roots.AddCert(server.leaf)
		cfg := &tls.Config{RootCAs: roots, ServerName: "app.example.com", GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return cert, nil
		}}
		c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg, DisableKeepAlives: true,
			DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
				return (&net.Dialer{}).DialContext(ctx, network, p.addr(httpsPort))
			}}}
		code, from, err := fetch(c, "https://app.example.com/")
		switch {
		case err != nil:
			return err
		case code != 200 || from != "tls-backend":
			return fmt.Errorf("%d from %q", code, from)
		}
		return nil
	}
	setBundle("clients", strangerCA)
	kubetest.WaitFor(t, 15*time.Second, "listener resolved", listenerIs(metav1.ConditionTrue, "ResolvedRefs"))
	kubetest.WaitFor(t, 15*time.Second, "stranger served", func() error { return https(&strangerCert) })
	if err := https(&clientCert); err == nil {
		t.Error("a client certificate of a CA not in the bundle was accepted")
	}
	setBundle("clients", clientCA)
	kubetest.WaitFor(t, 15*time.Second, "client accepted after its CA was added", func() error { return https(&clientCert) })
	// Taken out of the bundle, the stranger's CA opens no more connections.
	if err := https(&strangerCert); err == nil {
		t.Error("a client certificate of a CA removed from the bundle is still accepted")
	}
	if err := https(&tls.Certificate{}); err == nil {
		t.Error("a client without a certificate was served")
	}

	// A bundle deleted is unresolved again, and its backend answers 500.
	if err := bundles.Delete(ctx, "backends", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	kubetest.WaitFor(t, 15*time.Second, "policy unresolved after the deletion", policyIs(metav1.ConditionFalse, "InvalidCACertificateRef", `ClusterTrustBundle "backends"`))
	kubetest.WaitFor(t, 15*time.Second, "500 after the deletion", func() error {
		if code, _, err := fetch(plain, url); code != http.StatusInternalServerError {
			return fmt.Errorf("%d %v, want 500", code, err)
		}
		return nil
	})
}

// tlsBackendInNetns serves HTTPS in the fixture's network namespace with a
// certificate of ca for name, naming itself tls-backend in X-Backend, and
// returns its port.
func (f *clusterFixture) tlsBackendInNetns(ca *snitest.CA, name string) int32 {
	f.T.Helper()
	pair, err := ca.Issue(snitest.ECDSA, time.Now().UnixNano(), name)
	if err != nil {
		f.T.Fatal(err)
	}
	cert, err := tls.X509KeyPair(pair.CertPEM, pair.KeyPEM)
	if err != nil {
		f.T.Fatal(err)
	}
	ln, err := f.Netns.Listen("tcp", f.Netns.AddrPort(0))
	if err != nil {
		f.T.Fatal(err)
	}
	srv := &http.Server{
		ReadHeaderTimeout: 5 * time.Second,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("X-Backend", "tls-backend")
		}),
	}
	go srv.Serve(tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{cert}})) //nolint:errcheck // ends with Close
	f.T.Cleanup(func() { srv.Close() })
	return int32(ln.Addr().(*net.TCPAddr).Port)
}

// TestClusterTrustBundleNotServed: on an API server that does not serve
// ClusterTrustBundles, Portico starts (it does not wait for an informer
// that could never sync) and a reference to one is unresolved, saying so.
func TestClusterTrustBundleNotServed(t *testing.T) {
	env := kubetest.StartWith(t, kubetest.Options{APIServerArgs: []string{"--runtime-config=certificates.k8s.io/v1/clustertrustbundles=false"}})
	kc, gc := kubetest.Clients(t, env.Config)
	f := &clusterFixture{&kubetest.ClusterFixture{T: t, Env: env, Kube: kc, Gateway: gc}}
	ctx := t.Context()
	if _, err := kc.CertificatesV1().ClusterTrustBundles().List(ctx, metav1.ListOptions{}); err == nil {
		t.Fatal("the API server serves ClusterTrustBundles")
	}
	f.Namespace("portico-system", nil)
	f.Namespace("apps", nil)
	createClassAndGateway(t, gc, freeport.Port(t))
	mustCreate(t)(f.Kube.CoreV1().Services("apps").Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "secure"},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "https", Port: 443}}},
	}, metav1.CreateOptions{}))
	mustCreate(t)(gc.GatewayV1().BackendTLSPolicies("apps").Create(ctx, &gwv1.BackendTLSPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "tls"},
		Spec: gwv1.BackendTLSPolicySpec{
			TargetRefs: []gwv1.LocalPolicyTargetReferenceWithSectionName{{LocalPolicyTargetReference: gwv1.LocalPolicyTargetReference{Kind: "Service", Name: "secure"}}},
			Validation: gwv1.BackendTLSPolicyValidation{
				CACertificateRefs: []gwv1.LocalObjectReference{{Group: "certificates.k8s.io", Kind: "ClusterTrustBundle", Name: "backends"}},
				Hostname:          "backend.internal",
			},
		},
	}, metav1.CreateOptions{}))
	mustCreate(t)(gc.GatewayV1().HTTPRoutes("apps").Create(ctx, &gwv1.HTTPRoute{
		ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "r"},
		Spec: gwv1.HTTPRouteSpec{
			CommonRouteSpec: gwv1.CommonRouteSpec{ParentRefs: []gwv1.ParentReference{{Name: "gw"}}},
			Rules:           []gwv1.HTTPRouteRule{{BackendRefs: []gwv1.HTTPBackendRef{backendRef("secure")}}},
		},
	}, metav1.CreateOptions{}))
	f.startPortico(env.Config, "127.0.0.1", "portico-a", nil)
	kubetest.WaitFor(t, 15*time.Second, "policy unresolved", func() error {
		pol, err := gc.GatewayV1().BackendTLSPolicies("apps").Get(ctx, "tls", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if len(pol.Status.Ancestors) != 1 {
			return fmt.Errorf("ancestors %+v", pol.Status.Ancestors)
		}
		c := meta.FindStatusCondition(pol.Status.Ancestors[0].Conditions, "ResolvedRefs")
		if c == nil || c.Reason != "InvalidCACertificateRef" || !strings.Contains(c.Message, "does not serve certificates.k8s.io/v1 ClusterTrustBundles") {
			return fmt.Errorf("ResolvedRefs %+v", c)
		}
		return nil
	})
}
