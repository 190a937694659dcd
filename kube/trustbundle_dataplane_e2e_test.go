package kube

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"strconv"
	"testing"
	"time"

	certv1 "k8s.io/api/certificates/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"portico.dev/portico/internal/testkit/freeport"
	"portico.dev/portico/internal/testkit/kubetest"
	"portico.dev/portico/internal/testkit/snitest"
)

// TestDataPlaneClusterTrustBundle: a Gateway with a data plane of its own
// validates client certificates against a ClusterTrustBundle, which the
// controller streams to it in the Gateway's scope; the bundle's rotation
// reaches the data plane without a restart: a client certificate refused
// before its CA was added is accepted after, and one of the CA taken out
// is refused.
func TestDataPlaneClusterTrustBundle(t *testing.T) {
	kubetest.NeedNetns(t)
	f := newProvisionFixture(t)
	f.Netns = kubetest.NewNetns(t, "dataplane")
	ctx := context.Background()
	f.Namespace("portico-system", nil)
	f.Namespace("apps", nil)
	f.Service("apps", "blue", f.Backend("blue"))
	f.parameters("portico-system", "dedicated", `{mode: PerGateway, service: {type: ClusterIP}}`)
	f.class("dedicated", "portico-system", "dedicated")
	listen := "127.0.0.1:" + strconv.Itoa(freeport.Port(t))
	f.startController("portico-0", listen)

	newCA := func() *snitest.CA {
		ca, err := snitest.NewCA()
		if err != nil {
			t.Fatal(err)
		}
		return ca
	}
	clientCA, strangerCA := newCA(), newCA()
	clientCert := issueClientCert(t, clientCA, 1, "client")
	strangerCert := issueClientCert(t, strangerCA, 2, "stranger")
	server := newTestCert(t, "app.example.com")
	mustCreate(t)(f.Kube.CoreV1().Secrets("apps").Create(ctx, tlsSecret("apps", "cert", server), metav1.CreateOptions{}))
	bundles := f.Kube.CertificatesV1().ClusterTrustBundles()
	mustCreate(t)(bundles.Create(ctx, &certv1.ClusterTrustBundle{ObjectMeta: metav1.ObjectMeta{Name: "clients"},
		Spec: certv1.ClusterTrustBundleSpec{TrustBundle: string(strangerCA.CertPEM)}}, metav1.CreateOptions{}))

	port := freeport.Port(t)
	mustCreate(t)(f.Gateway.GatewayV1().HTTPRoutes("apps").Create(ctx, &gwv1.HTTPRoute{
		ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "web"},
		Spec: gwv1.HTTPRouteSpec{
			CommonRouteSpec: gwv1.CommonRouteSpec{ParentRefs: []gwv1.ParentReference{{Name: "web"}}},
			Rules:           []gwv1.HTTPRouteRule{{BackendRefs: []gwv1.HTTPBackendRef{{BackendRef: gwv1.BackendRef{BackendObjectReference: gwv1.BackendObjectReference{Name: "blue", Port: ptr.To(gwv1.PortNumber(80))}}}}}},
		},
	}, metav1.CreateOptions{}))
	f.gateway(&gwv1.Gateway{
		ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "web"},
		Spec: gwv1.GatewaySpec{
			GatewayClassName: "dedicated",
			TLS: &gwv1.GatewayTLSConfig{Frontend: &gwv1.FrontendTLSConfig{Default: gwv1.TLSConfig{Validation: &gwv1.FrontendTLSValidation{
				CACertificateRefs: []gwv1.ObjectReference{{Group: "certificates.k8s.io", Kind: "ClusterTrustBundle", Name: "clients"}},
			}}}},
			Listeners: []gwv1.Listener{{Name: "https", Port: gwv1.PortNumber(port), Protocol: gwv1.HTTPSProtocolType,
				TLS: &gwv1.ListenerTLSConfig{CertificateRefs: []gwv1.SecretObjectReference{{Name: "cert"}}}}},
		},
	})
	kubetest.WaitFor(t, 20*time.Second, "Deployment provisioned", func() error { _, err := f.deployment("apps", "web-dedicated"); return err })
	startDataPlane(t, f, "apps", "web-dedicated")

	roots := x509.NewCertPool()
	roots.AddCert(server.leaf)
	request := func(cert *tls.Certificate) error {
		cfg := &tls.Config{RootCAs: roots, ServerName: "app.example.com", GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return cert, nil
		}}
		c := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg, DisableKeepAlives: true}}
		return expectServed(c, fmt.Sprintf("https://127.0.0.1:%d/", port), 200, "blue")()
	}
	kubetest.WaitFor(t, 30*time.Second, "a client of the bundle's CA served by the data plane", func() error { return request(&strangerCert) })
	if err := request(&clientCert); err == nil {
		t.Error("a client of a CA not in the bundle was served")
	}

	kubetest.WaitFor(t, 10*time.Second, "bundle rotated", func() error {
		b, err := bundles.Get(ctx, "clients", metav1.GetOptions{})
		if err != nil {
			return err
		}
		b.Spec.TrustBundle = string(clientCA.CertPEM)
		_, err = bundles.Update(ctx, b, metav1.UpdateOptions{})
		return err
	})
	kubetest.WaitFor(t, 30*time.Second, "the client accepted after its CA was added", func() error { return request(&clientCert) })
	if err := request(&strangerCert); err == nil {
		t.Error("a client of a CA taken out of the bundle is still served")
	}
}
