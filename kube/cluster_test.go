package kube

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
	gatewayclient "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"

	"portico.dev/portico/internal/controlplane/acme"
	"portico.dev/portico/internal/controlplane/pipeline"
	"portico.dev/portico/internal/controlplane/wellknown"
	"portico.dev/portico/internal/testkit/freeport"
	"portico.dev/portico/internal/testkit/kubetest"
	"portico.dev/portico/kube/leader"
	"portico.dev/portico/proxy"
	"portico.dev/portico/translate"
)

// clusterFixture is kubetest's cluster fixture, with the in-process
// Portico replicas these tests start on it (startPortico), which need this
// package's Cluster.
type clusterFixture struct {
	*kubetest.ClusterFixture
}

func newClusterFixture(t testing.TB) *clusterFixture {
	t.Helper()
	return &clusterFixture{kubetest.NewClusterFixture(t)}
}

func tlsSecret(namespace, name string, c testCert) *corev1.Secret {
	return kubetest.TLSSecret(namespace, name, []byte(c.certPEM), []byte(c.keyPEM))
}

// clusterInstance is one Portico replica in cluster mode, in process: the
// cluster source and outputs, and the run loop over them.
type clusterInstance struct {
	c      *Cluster
	loop   *pipeline.Loop
	rt     *proxy.Runtime
	bind   string
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
}

// replicaSetup is what a test may change before a replica runs.
type replicaSetup struct {
	c    *Cluster
	opts pipeline.Options
	// applied is the loop's Outputs.Applied.
	applied func(pipeline.ApplyReport)
	acme    *acme.Manager
	rt      *proxy.Runtime
	// changed asks the replica's loop for a rebuild (an ACME manager's
	// OnChange).
	changed func()
	// readyWithin bounds the wait for the first config applied: listing
	// 300,000 objects takes minutes, a test's handful a second.
	readyWithin time.Duration
}

// startPortico runs a replica with cfg's identity, binding listener ports
// on bind (a loopback address). mod adjusts the setup before it runs.
func (f *clusterFixture) startPortico(cfg *rest.Config, bind, identity string, mod func(*replicaSetup)) *clusterInstance {
	f.T.Helper()
	kc, gc := kubetest.Clients(f.T, cfg)
	md, err := metadata.NewForConfig(cfg)
	if err != nil {
		f.T.Fatal(err)
	}
	log := zaptest.NewLogger(f.T).Named(identity)
	opts := proxy.DefaultOptions()
	opts.BindAddress = bind
	opts.DrainTimeout = 2 * time.Second
	var loop *pipeline.Loop
	setup := &replicaSetup{
		c: &Cluster{
			Kube:     kc,
			Gateway:  gc,
			Metadata: md,
			Log:      log,
			LeaderElection: leader.Election{
				Namespace: "portico-system", Name: "portico", Identity: identity,
				LeaseDuration: 3 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 250 * time.Millisecond,
				ReleaseOnCancel: true,
			},
		},
		opts: pipeline.Options{
			Holdoff:    20 * time.Millisecond,
			MaxDelay:   200 * time.Millisecond,
			RetryAfter: 500 * time.Millisecond,
			Translate:  translate.Settings{Shared: &translate.SharedAddresses{}},
		},
		rt:          proxy.New(opts, log.Named("proxy")),
		changed:     func() { loop.Changed() },
		readyWithin: 30 * time.Second,
	}
	if mod != nil {
		mod(setup)
	}
	c := setup.c
	c.ACME = setup.acme
	var certs pipeline.ACME
	if setup.acme != nil {
		certs = setup.acme
	}
	loop = pipeline.New(setup.opts, c, setup.rt, certs,
		pipeline.Outputs{Statuses: c.WriteStatuses, Facts: c.Facts, ACME: c.WriteACME, Applied: setup.applied, DataPlanes: c.WriteDataPlanes}, log)
	ctx, cancel := context.WithCancel(context.Background())
	inst := &clusterInstance{c: c, loop: loop, rt: setup.rt, bind: bind, cancel: cancel, done: make(chan error, 1)}
	go func() { inst.done <- loop.Run(ctx) }()
	f.T.Cleanup(inst.stop)
	deadline := time.Now().Add(setup.readyWithin)
	for loop.Ready() != nil {
		select {
		case err := <-inst.done:
			f.T.Fatalf("Portico %s stopped before it was ready: %v", identity, err)
		default:
		}
		if time.Now().After(deadline) {
			f.T.Fatalf("Portico %s not ready: %v", identity, loop.Ready())
		}
		time.Sleep(10 * time.Millisecond)
	}
	return inst
}

// stop ends the replica as a crash would, as far as the data plane goes:
// its ports close. Whether the lease is released depends on
// LeaderElection.ReleaseOnCancel.
func (i *clusterInstance) stop() {
	i.once.Do(func() {
		i.cancel()
		<-i.done
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = i.rt.Close(ctx)
	})
}

// addr is where the replica serves port.
func (i *clusterInstance) addr(port int32) string {
	return net.JoinHostPort(i.bind, strconv.Itoa(int(port)))
}

// fetch sends one GET and returns the status and the backend that answered.
func fetch(c *http.Client, url string) (int, string, error) {
	resp, err := c.Get(url)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, resp.Header.Get("X-Backend"), nil
}

func expectServed(c *http.Client, url string, code int, backend string) func() error {
	return func() error {
		got, from, err := fetch(c, url)
		if err != nil {
			return err
		}
		if got != code || from != backend {
			return fmt.Errorf("GET %s = %d from %q, want %d from %q", url, got, from, code, backend)
		}
		return nil
	}
}

// conditionIs checks one condition's status, reason and observedGeneration.
func conditionIs(conds []metav1.Condition, typ string, status metav1.ConditionStatus, reason string, gen int64) error {
	c := meta.FindStatusCondition(conds, typ)
	switch {
	case c == nil:
		return fmt.Errorf("no %s condition in %v", typ, conds)
	case c.Status != status || (reason != "" && c.Reason != reason):
		return fmt.Errorf("%s = %s/%s (%s), want %s/%s", typ, c.Status, c.Reason, c.Message, status, reason)
	case c.ObservedGeneration != gen:
		return fmt.Errorf("%s observedGeneration %d, want %d", typ, c.ObservedGeneration, gen)
	case c.LastTransitionTime.IsZero():
		return fmt.Errorf("%s has no lastTransitionTime", typ)
	}
	return nil
}

func routeParent(r *gwv1.HTTPRoute, controller gwv1.GatewayController, parent string) *gwv1.RouteParentStatus {
	for i := range r.Status.Parents {
		p := &r.Status.Parents[i]
		if p.ControllerName == controller && string(p.ParentRef.Name) == parent {
			return p
		}
	}
	return nil
}

const otherController gwv1.GatewayController = "example.net/other-controller"

// TestClusterServesAndWritesStatus drives Portico through the API server
// only: objects created, updated and deleted through it are served, and
// the statuses written are those the conformance suite checks.
func TestClusterServesAndWritesStatus(t *testing.T) {
	f := newClusterFixture(t)
	ctx := t.Context()
	gws := f.Gateway.GatewayV1()
	f.Namespace("portico-system", nil)
	f.Namespace("apps", nil)
	backendA, backendB := f.Backend("backend-a"), f.Backend("backend-b")
	f.Service("apps", "svc-a", backendA)
	f.Service("apps", "svc-b", backendB)
	httpPort, httpsPort := int32(freeport.Port(t)), int32(freeport.Port(t))
	certA := newTestCert(t, "a.example.com")
	if _, err := f.Kube.CoreV1().Secrets("apps").Create(ctx, tlsSecret("apps", "cert-a", certA), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The Service in front of Portico, whose address Gateways report.
	front, err := f.Kube.CoreV1().Services("portico-system").Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "portico-system", Name: "portico"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Ports: []corev1.ServicePort{
			{Name: "http", Port: 80, TargetPort: intstr.FromInt32(httpPort)},
		}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	createClassAndGateway(t, f.Gateway, int(httpPort))
	mustCreate(t)(gws.GatewayClasses().Create(ctx, &gwv1.GatewayClass{
		ObjectMeta: metav1.ObjectMeta{Name: "other"},
		Spec:       gwv1.GatewayClassSpec{ControllerName: otherController},
	}, metav1.CreateOptions{}))
	mustCreate(t)(gws.Gateways("apps").Create(ctx, &gwv1.Gateway{
		ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "other-gw"},
		Spec: gwv1.GatewaySpec{
			GatewayClassName: "other",
			Listeners:        []gwv1.Listener{{Name: "http", Port: 80, Protocol: gwv1.HTTPProtocolType}},
		},
	}, metav1.CreateOptions{}))
	mustCreate(t)(gws.ListenerSets("apps").Create(ctx, &gwv1.ListenerSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "ls-a"},
		Spec: gwv1.ListenerSetSpec{
			ParentRef: gwv1.ParentGatewayReference{Name: "gw"},
			Listeners: []gwv1.ListenerEntry{{
				Name: "https", Hostname: ptr.To(gwv1.Hostname("a.example.com")),
				Port: gwv1.PortNumber(httpsPort), Protocol: gwv1.HTTPSProtocolType,
				TLS: &gwv1.ListenerTLSConfig{CertificateRefs: []gwv1.SecretObjectReference{{Name: "cert-a"}}},
			}},
		},
	}, metav1.CreateOptions{}))
	lsKind := gwv1.Kind("ListenerSet")
	mustCreate(t)(gws.HTTPRoutes("apps").Create(ctx, &gwv1.HTTPRoute{
		ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "route-a"},
		Spec: gwv1.HTTPRouteSpec{
			CommonRouteSpec: gwv1.CommonRouteSpec{ParentRefs: []gwv1.ParentReference{{Kind: &lsKind, Name: "ls-a"}}},
			Rules:           []gwv1.HTTPRouteRule{{BackendRefs: []gwv1.HTTPBackendRef{backendRef("svc-a")}}},
		},
	}, metav1.CreateOptions{}))
	mustCreate(t)(gws.HTTPRoutes("apps").Create(ctx, &gwv1.HTTPRoute{
		ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "plain"},
		Spec: gwv1.HTTPRouteSpec{
			CommonRouteSpec: gwv1.CommonRouteSpec{ParentRefs: []gwv1.ParentReference{
				{Name: "gw", SectionName: ptr.To(gwv1.SectionName("http"))},
				{Name: "other-gw"},
			}},
			Hostnames: []gwv1.Hostname{"plain.example.com"},
			Rules: []gwv1.HTTPRouteRule{{
				Matches:     []gwv1.HTTPRouteMatch{{Path: &gwv1.HTTPPathMatch{Type: ptr.To(gwv1.PathMatchPathPrefix), Value: ptr.To("/api")}}},
				BackendRefs: []gwv1.HTTPBackendRef{backendRef("svc-b")},
			}},
		},
	}, metav1.CreateOptions{}))
	// Another controller has already written its entry for other-gw.
	plain, err := gws.HTTPRoutes("apps").Get(ctx, "plain", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	otherEntry := gwv1.RouteParentStatus{
		ParentRef:      gwv1.ParentReference{Group: ptr.To(gwv1.Group(gwv1.GroupName)), Kind: ptr.To(gwv1.Kind("Gateway")), Name: "other-gw"},
		ControllerName: otherController,
		Conditions: []metav1.Condition{{
			Type: "Accepted", Status: metav1.ConditionTrue, Reason: "Accepted", ObservedGeneration: 1,
			LastTransitionTime: metav1.NewTime(time.Now().Truncate(time.Second)),
		}},
	}
	plain.Status.Parents = []gwv1.RouteParentStatus{otherEntry}
	if _, err := gws.HTTPRoutes("apps").UpdateStatus(ctx, plain, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	var applied atomic.Int64
	p := f.startPortico(f.Env.Config, "127.0.0.1", "portico-a", func(s *replicaSetup) {
		s.opts.Translate.Shared = &translate.SharedAddresses{Service: types.NamespacedName{Namespace: "portico-system", Name: "portico"}}
		s.applied = func(r pipeline.ApplyReport) {
			if r.Err == nil {
				applied.Store(r.Generation)
			}
		}
	})
	kubetest.WaitFor(t, 10*time.Second, "leading", func() error {
		if !p.c.Leading() {
			return errors.New("not leading")
		}
		return nil
	})

	roots := x509.NewCertPool()
	roots.AddCert(certA.leaf)
	httpC := httpClient(p.addr(httpPort))
	kubetest.WaitFor(t, 10*time.Second, "HTTP route served", expectServed(httpC, "http://plain.example.com/api/x", 200, "backend-b"))
	if err := expectServed(httpC, "http://plain.example.com/other", 404, "")(); err != nil {
		t.Error(err)
	}
	kubetest.WaitFor(t, 10*time.Second, "HTTPS ListenerSet route served", expectServed(tlsClient(p.addr(httpsPort), roots, false), "https://a.example.com/x", 200, "backend-a"))

	// Statuses, as the conformance suite reads them.
	kubetest.WaitFor(t, 10*time.Second, "GatewayClass status", func() error {
		gc, err := gws.GatewayClasses().Get(ctx, "portico", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if err := conditionIs(gc.Status.Conditions, "Accepted", "True", "Accepted", gc.Generation); err != nil {
			return err
		}
		return conditionIs(gc.Status.Conditions, "SupportedVersion", "True", "SupportedVersion", gc.Generation)
	})
	kubetest.WaitFor(t, 10*time.Second, "Gateway status", func() error {
		gw, err := gws.Gateways("apps").Get(ctx, "gw", metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, c := range []string{"Accepted", "Programmed"} {
			if err := conditionIs(gw.Status.Conditions, c, "True", c, gw.Generation); err != nil {
				return err
			}
		}
		if len(gw.Status.Addresses) != 1 || gw.Status.Addresses[0].Value != front.Spec.ClusterIP || ptrValue(gw.Status.Addresses[0].Type) != gwv1.IPAddressType {
			return fmt.Errorf("addresses %+v, want the Service's cluster IP %s", gw.Status.Addresses, front.Spec.ClusterIP)
		}
		if ptrValue(gw.Status.AttachedListenerSets) != 1 {
			return fmt.Errorf("attachedListenerSets %v", gw.Status.AttachedListenerSets)
		}
		if len(gw.Status.Listeners) != 1 || gw.Status.Listeners[0].AttachedRoutes != 1 {
			return fmt.Errorf("listeners %+v", gw.Status.Listeners)
		}
		return conditionIs(gw.Status.Listeners[0].Conditions, "Programmed", "True", "Programmed", gw.Generation)
	})
	kubetest.WaitFor(t, 10*time.Second, "ListenerSet status", func() error {
		ls, err := gws.ListenerSets("apps").Get(ctx, "ls-a", metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, c := range []string{"Accepted", "Programmed"} {
			if err := conditionIs(ls.Status.Conditions, c, "True", c, ls.Generation); err != nil {
				return err
			}
		}
		if len(ls.Status.Listeners) != 1 || ls.Status.Listeners[0].AttachedRoutes != 1 {
			return fmt.Errorf("listeners %+v", ls.Status.Listeners)
		}
		return conditionIs(ls.Status.Listeners[0].Conditions, "ResolvedRefs", "True", "ResolvedRefs", ls.Generation)
	})
	checkRoute := func(name, parent string, wantOther bool) func() error {
		return func() error {
			r, err := gws.HTTPRoutes("apps").Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			ours := routeParent(r, wellknown.ControllerName, parent)
			if ours == nil {
				return fmt.Errorf("no parent entry of Portico for %s: %+v", parent, r.Status.Parents)
			}
			for _, c := range []string{"Accepted", "ResolvedRefs"} {
				if err := conditionIs(ours.Conditions, c, "True", c, r.Generation); err != nil {
					return err
				}
			}
			if routeParent(r, wellknown.ControllerName, "other-gw") != nil {
				return errors.New("Portico wrote an entry for another controller's Gateway")
			}
			if other := routeParent(r, otherController, "other-gw"); wantOther && (other == nil || other.Conditions[0].ObservedGeneration != 1) {
				return fmt.Errorf("the other controller's entry is gone or changed: %+v", r.Status.Parents)
			}
			return nil
		}
	}
	kubetest.WaitFor(t, 10*time.Second, "route-a status", checkRoute("route-a", "ls-a", false))
	kubetest.WaitFor(t, 10*time.Second, "plain status", checkRoute("plain", "gw", true))

	t.Run("NoWriteWhenNothingChanged", func(t *testing.T) {
		// A pass over unchanged statuses compares and writes nothing. The
		// counts are taken once the pass that wrote the statuses above has
		// finished: the API server shows a write before the writer counts it.
		kubetest.WaitFor(t, 10*time.Second, "status writer idle", func() error {
			if !p.c.writer.Stats().Idle {
				return errors.New("a batch is still being written")
			}
			return nil
		})
		before := p.c.writer.Stats()
		writes, passes := before.Writes, before.Passes
		p.c.writer.Resync()
		kubetest.WaitFor(t, 10*time.Second, "a status pass", func() error {
			if p.c.writer.Stats().Passes <= passes {
				return errors.New("no pass yet")
			}
			return nil
		})
		if got := p.c.writer.Stats().Writes; got != writes {
			t.Errorf("%d status writes with nothing changed", got-writes)
		}
	})

	t.Run("Updates", func(t *testing.T) {
		plain, err := gws.HTTPRoutes("apps").Get(ctx, "plain", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		plain.Spec.Rules[0].Matches[0].Path.Value = ptr.To("/v2")
		if _, err := gws.HTTPRoutes("apps").Update(ctx, plain, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		kubetest.WaitFor(t, 10*time.Second, "updated route served", expectServed(httpC, "http://plain.example.com/v2/x", 200, "backend-b"))
		if err := expectServed(httpC, "http://plain.example.com/api/x", 404, "")(); err != nil {
			t.Error(err)
		}
		kubetest.WaitFor(t, 10*time.Second, "updated route status", checkRoute("plain", "gw", true))

		// The Service in front gets a load balancer address: it replaces the
		// cluster IP in every Gateway's status.
		front, err := f.Kube.CoreV1().Services("portico-system").Get(ctx, "portico", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		front.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "192.0.2.10"}, {Hostname: "edge.example.net"}}
		if _, err := f.Kube.CoreV1().Services("portico-system").UpdateStatus(ctx, front, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		kubetest.WaitFor(t, 10*time.Second, "load balancer addresses", func() error {
			gw, err := gws.Gateways("apps").Get(ctx, "gw", metav1.GetOptions{})
			if err != nil {
				return err
			}
			a := gw.Status.Addresses
			if len(a) != 2 || a[0].Value != "192.0.2.10" || *a[0].Type != gwv1.IPAddressType || a[1].Value != "edge.example.net" || *a[1].Type != gwv1.HostnameAddressType {
				return fmt.Errorf("addresses %+v", a)
			}
			return nil
		})

		// spec.addresses picks among those addresses; naming another one
		// leaves the Gateway not programmed but still serving.
		setAddresses := func(addrs ...gwv1.GatewaySpecAddress) int64 {
			t.Helper()
			gw, err := gws.Gateways("apps").Get(ctx, "gw", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			gw.Spec.Addresses = addrs
			gw, err = gws.Gateways("apps").Update(ctx, gw, metav1.UpdateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			return gw.Generation
		}
		gatewayIs := func(gen int64, reason string, addrs ...string) func() error {
			return func() error {
				gw, err := gws.Gateways("apps").Get(ctx, "gw", metav1.GetOptions{})
				if err != nil {
					return err
				}
				status := metav1.ConditionTrue
				if reason != "Programmed" {
					status = metav1.ConditionFalse
				}
				if err := conditionIs(gw.Status.Conditions, "Programmed", status, reason, gen); err != nil {
					return err
				}
				var got []string
				for _, a := range gw.Status.Addresses {
					got = append(got, a.Value)
				}
				if !slices.Equal(got, addrs) {
					return fmt.Errorf("addresses %q, want %q", got, addrs)
				}
				return nil
			}
		}
		gen := setAddresses(gwv1.GatewaySpecAddress{Type: ptr.To(gwv1.HostnameAddressType), Value: "edge.example.net"})
		kubetest.WaitFor(t, 10*time.Second, "Gateway asking for the load balancer's hostname", gatewayIs(gen, "Programmed", "edge.example.net"))
		gen = setAddresses(gwv1.GatewaySpecAddress{Type: ptr.To(gwv1.IPAddressType), Value: "198.51.100.7"})
		kubetest.WaitFor(t, 10*time.Second, "Gateway asking for an address Portico does not have", gatewayIs(gen, "AddressNotUsable"))
		if err := expectServed(httpC, "http://plain.example.com/v2/x", 200, "backend-b")(); err != nil {
			t.Errorf("Gateway with an unusable address stopped serving: %v", err)
		}
		gen = setAddresses()
		kubetest.WaitFor(t, 10*time.Second, "Gateway asking for nothing", gatewayIs(gen, "Programmed", "192.0.2.10", "edge.example.net"))
	})

	t.Run("SecretRotation", func(t *testing.T) {
		rotated := newTestCert(t, "a.example.com")
		s, err := f.Kube.CoreV1().Secrets("apps").Get(ctx, "cert-a", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		s.Data = tlsSecret("apps", "cert-a", rotated).Data
		if _, err := f.Kube.CoreV1().Secrets("apps").Update(ctx, s, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		kubetest.WaitFor(t, 10*time.Second, "rotated certificate served", func() error {
			conn, err := tls.Dial("tcp", p.addr(httpsPort), &tls.Config{ServerName: "a.example.com", InsecureSkipVerify: true})
			if err != nil {
				return err
			}
			defer conn.Close()
			if got := conn.ConnectionState().PeerCertificates[0]; !got.Equal(rotated.leaf) {
				return fmt.Errorf("served certificate serial %v, want the rotated one %v", got.SerialNumber, rotated.leaf.SerialNumber)
			}
			return nil
		})
		roots := x509.NewCertPool()
		roots.AddCert(rotated.leaf)
		if err := expectServed(tlsClient(p.addr(httpsPort), roots, true), "https://a.example.com/y", 200, "backend-a")(); err != nil {
			t.Error(err)
		}
	})

	t.Run("BackendTLSPolicyStatus", func(t *testing.T) {
		// A policy for a Service a route of gw uses gets gw as ancestor;
		// when no route uses it any more, Portico's entry goes and another
		// controller's stays.
		f.Service("apps", "svc-tls", int32(freeport.Port(t)))
		ca := newTestCert(t, "ca.internal")
		mustCreate(t)(f.Kube.CoreV1().ConfigMaps("apps").Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "ca"},
			Data:       map[string]string{"ca.crt": ca.certPEM},
		}, metav1.CreateOptions{}))
		mustCreate(t)(gws.BackendTLSPolicies("apps").Create(ctx, &gwv1.BackendTLSPolicy{
			ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "tls"},
			Spec: gwv1.BackendTLSPolicySpec{
				TargetRefs: []gwv1.LocalPolicyTargetReferenceWithSectionName{{LocalPolicyTargetReference: gwv1.LocalPolicyTargetReference{Kind: "Service", Name: "svc-tls"}}},
				Validation: gwv1.BackendTLSPolicyValidation{
					CACertificateRefs: []gwv1.LocalObjectReference{{Kind: "ConfigMap", Name: "ca"}},
					Hostname:          "svc-tls.internal",
				},
			},
		}, metav1.CreateOptions{}))
		mustCreate(t)(gws.HTTPRoutes("apps").Create(ctx, &gwv1.HTTPRoute{
			ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "to-tls"},
			Spec: gwv1.HTTPRouteSpec{
				CommonRouteSpec: gwv1.CommonRouteSpec{ParentRefs: []gwv1.ParentReference{{Name: "gw", SectionName: ptr.To(gwv1.SectionName("http"))}}},
				Hostnames:       []gwv1.Hostname{"tls.example.com"},
				Rules:           []gwv1.HTTPRouteRule{{BackendRefs: []gwv1.HTTPBackendRef{backendRef("svc-tls")}}},
			},
		}, metav1.CreateOptions{}))
		kubetest.WaitFor(t, 10*time.Second, "policy ancestor", func() error {
			p, err := gws.BackendTLSPolicies("apps").Get(ctx, "tls", metav1.GetOptions{})
			if err != nil {
				return err
			}
			if len(p.Status.Ancestors) != 1 || p.Status.Ancestors[0].AncestorRef.Name != "gw" {
				return fmt.Errorf("ancestors %+v", p.Status.Ancestors)
			}
			for _, c := range []string{"Accepted", "ResolvedRefs"} {
				if err := conditionIs(p.Status.Ancestors[0].Conditions, c, "True", c, p.Generation); err != nil {
					return err
				}
			}
			return nil
		})
		policy, err := gws.BackendTLSPolicies("apps").Get(ctx, "tls", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		other := gwv1.PolicyAncestorStatus{
			AncestorRef:    gwv1.ParentReference{Name: "other-gw"},
			ControllerName: otherController,
			Conditions: []metav1.Condition{{Type: "Accepted", Status: metav1.ConditionTrue, Reason: "Accepted", ObservedGeneration: policy.Generation,
				LastTransitionTime: metav1.NewTime(time.Now().Truncate(time.Second))}},
		}
		policy.Status.Ancestors = append(policy.Status.Ancestors, other)
		if _, err := gws.BackendTLSPolicies("apps").UpdateStatus(ctx, policy, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := gws.HTTPRoutes("apps").Delete(ctx, "to-tls", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		kubetest.WaitFor(t, 10*time.Second, "stale ancestor removed", func() error {
			p, err := gws.BackendTLSPolicies("apps").Get(ctx, "tls", metav1.GetOptions{})
			if err != nil {
				return err
			}
			if len(p.Status.Ancestors) != 1 || p.Status.Ancestors[0].ControllerName != otherController {
				return fmt.Errorf("ancestors %+v, want only the other controller's", p.Status.Ancestors)
			}
			return nil
		})
	})

	t.Run("ApplyFailure", func(t *testing.T) {
		// A port something else holds: that Gateway is not programmed,
		// everything else keeps serving, and once the port is free Portico
		// binds it on its own.
		blocker, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer blocker.Close()
		port := gwv1.PortNumber(blocker.Addr().(*net.TCPAddr).Port)
		all := gwv1.NamespacesFromAll
		mustCreate(t)(gws.Gateways("apps").Create(ctx, &gwv1.Gateway{
			ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "blocked"},
			Spec: gwv1.GatewaySpec{
				GatewayClassName: "portico",
				Listeners: []gwv1.Listener{{Name: "http", Port: port, Protocol: gwv1.HTTPProtocolType,
					AllowedRoutes: &gwv1.AllowedRoutes{Namespaces: &gwv1.RouteNamespaces{From: &all}}}},
			},
		}, metav1.CreateOptions{}))
		kubetest.WaitFor(t, 10*time.Second, "blocked Gateway not programmed", func() error {
			gw, err := gws.Gateways("apps").Get(ctx, "blocked", metav1.GetOptions{})
			if err != nil {
				return err
			}
			if err := conditionIs(gw.Status.Conditions, "Programmed", "False", string(gwv1.GatewayReasonNoResources), gw.Generation); err != nil {
				return err
			}
			if len(gw.Status.Listeners) != 1 {
				return fmt.Errorf("listeners %+v", gw.Status.Listeners)
			}
			if err := conditionIs(gw.Status.Listeners[0].Conditions, "Programmed", "False", string(gwv1.ListenerReasonPending), gw.Generation); err != nil {
				return err
			}
			return conditionIs(gw.Status.Conditions, "Accepted", "True", "Accepted", gw.Generation)
		})
		if err := expectServed(httpC, "http://plain.example.com/v2/x", 200, "backend-b")(); err != nil {
			t.Errorf("other Gateway while a port fails: %v", err)
		}
		gw, err := gws.Gateways("apps").Get(ctx, "gw", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if err := conditionIs(gw.Status.Conditions, "Programmed", "True", "Programmed", gw.Generation); err != nil {
			t.Errorf("healthy Gateway: %v", err)
		}
		blocker.Close()
		kubetest.WaitFor(t, 10*time.Second, "freed port bound and programmed", func() error {
			if p.rt.Addr("", int32(port)) == nil {
				return errors.New("port not bound")
			}
			gw, err := gws.Gateways("apps").Get(ctx, "blocked", metav1.GetOptions{})
			if err != nil {
				return err
			}
			return conditionIs(gw.Status.Conditions, "Programmed", "True", "Programmed", gw.Generation)
		})
	})

	t.Run("Deletes", func(t *testing.T) {
		if err := gws.ListenerSets("apps").Delete(ctx, "ls-a", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		kubetest.WaitFor(t, 10*time.Second, "deleted ListenerSet stops serving", func() error {
			conn, err := tls.Dial("tcp", p.addr(httpsPort), &tls.Config{ServerName: "a.example.com", InsecureSkipVerify: true})
			if err == nil {
				conn.Close()
				return errors.New("handshake still succeeds")
			}
			return nil
		})
		kubetest.WaitFor(t, 10*time.Second, "Gateway counts no ListenerSet", func() error {
			gw, err := gws.Gateways("apps").Get(ctx, "gw", metav1.GetOptions{})
			if err != nil {
				return err
			}
			if n := ptrValue(gw.Status.AttachedListenerSets); n != 0 {
				return fmt.Errorf("attachedListenerSets %d", n)
			}
			return nil
		})
		// route-a's parent is gone: Portico takes its entry back, leaving
		// an empty list.
		kubetest.WaitFor(t, 10*time.Second, "route-a entry removed", func() error {
			r, err := gws.HTTPRoutes("apps").Get(ctx, "route-a", metav1.GetOptions{})
			if err != nil {
				return err
			}
			if len(r.Status.Parents) != 0 {
				return fmt.Errorf("parents %+v", r.Status.Parents)
			}
			return nil
		})
		// A route that no longer names a Portico parent loses Portico's
		// entry, and only that.
		plain, err := gws.HTTPRoutes("apps").Get(ctx, "plain", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		plain.Spec.ParentRefs = plain.Spec.ParentRefs[1:]
		if _, err := gws.HTTPRoutes("apps").Update(ctx, plain, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		kubetest.WaitFor(t, 10*time.Second, "route off Portico", expectServed(httpC, "http://plain.example.com/v2/x", 404, ""))
		kubetest.WaitFor(t, 10*time.Second, "Portico's entry removed", func() error {
			r, err := gws.HTTPRoutes("apps").Get(ctx, "plain", metav1.GetOptions{})
			if err != nil {
				return err
			}
			if routeParent(r, wellknown.ControllerName, "gw") != nil {
				return errors.New("Portico's entry is still there")
			}
			if routeParent(r, otherController, "other-gw") == nil {
				return fmt.Errorf("the other controller's entries went too: %+v", r.Status.Parents)
			}
			return nil
		})
	})

	t.Run("InvalidObjects", func(t *testing.T) {
		gen := applied.Load()
		// What the CRD validation rejects never exists, so Portico never sees it.
		_, err := gws.HTTPRoutes("apps").Create(ctx, &gwv1.HTTPRoute{
			ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "bad-path"},
			Spec: gwv1.HTTPRouteSpec{
				CommonRouteSpec: gwv1.CommonRouteSpec{ParentRefs: []gwv1.ParentReference{{Name: "gw"}}},
				Rules: []gwv1.HTTPRouteRule{{Matches: []gwv1.HTTPRouteMatch{{Path: &gwv1.HTTPPathMatch{
					Type: ptr.To(gwv1.PathMatchPathPrefix), Value: ptr.To("no-leading-slash"),
				}}}}},
			},
		}, metav1.CreateOptions{})
		if !apierrors.IsInvalid(err) {
			t.Errorf("HTTPRoute with a relative path: %v, want Invalid", err)
		}
		_, err = gws.Gateways("apps").Create(ctx, &gwv1.Gateway{
			ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "bad-listeners"},
			Spec: gwv1.GatewaySpec{GatewayClassName: "portico", Listeners: []gwv1.Listener{
				{Name: "dup", Port: 8001, Protocol: gwv1.HTTPProtocolType},
				{Name: "dup", Port: 8002, Protocol: gwv1.HTTPProtocolType},
			}},
		}, metav1.CreateOptions{})
		if !apierrors.IsInvalid(err) {
			t.Errorf("Gateway with duplicate listener names: %v, want Invalid", err)
		}

		// What the API accepts but Portico cannot serve gets conditions.
		unservable := int32(freeport.Port(t))
		mustCreate(t)(gws.Gateways("apps").Create(ctx, &gwv1.Gateway{
			ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "odd"},
			Spec: gwv1.GatewaySpec{GatewayClassName: "portico", Listeners: []gwv1.Listener{
				{Name: "custom", Port: gwv1.PortNumber(unservable), Protocol: "example.com/quic"},
				{Name: "https", Port: gwv1.PortNumber(unservable), Protocol: gwv1.HTTPSProtocolType, Hostname: ptr.To(gwv1.Hostname("odd.example.com")),
					TLS: &gwv1.ListenerTLSConfig{CertificateRefs: []gwv1.SecretObjectReference{{Name: "missing"}}}},
			}},
		}, metav1.CreateOptions{}))
		mustCreate(t)(gws.HTTPRoutes("apps").Create(ctx, &gwv1.HTTPRoute{
			ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "no-backend"},
			Spec: gwv1.HTTPRouteSpec{
				CommonRouteSpec: gwv1.CommonRouteSpec{ParentRefs: []gwv1.ParentReference{{Name: "gw"}}},
				Hostnames:       []gwv1.Hostname{"nobackend.example.com"},
				Rules:           []gwv1.HTTPRouteRule{{BackendRefs: []gwv1.HTTPBackendRef{backendRef("does-not-exist")}}},
			},
		}, metav1.CreateOptions{}))
		kubetest.WaitFor(t, 10*time.Second, "unservable Gateway's conditions", func() error {
			gw, err := gws.Gateways("apps").Get(ctx, "odd", metav1.GetOptions{})
			if err != nil {
				return err
			}
			byName := map[gwv1.SectionName][]metav1.Condition{}
			for _, l := range gw.Status.Listeners {
				byName[l.Name] = l.Conditions
			}
			if err := conditionIs(byName["custom"], "Accepted", "False", string(gwv1.ListenerReasonUnsupportedProtocol), gw.Generation); err != nil {
				return fmt.Errorf("custom protocol listener: %w", err)
			}
			if err := conditionIs(byName["https"], "ResolvedRefs", "False", string(gwv1.ListenerReasonInvalidCertificateRef), gw.Generation); err != nil {
				return fmt.Errorf("https listener: %w", err)
			}
			return nil
		})
		kubetest.WaitFor(t, 10*time.Second, "route without backend", func() error {
			r, err := gws.HTTPRoutes("apps").Get(ctx, "no-backend", metav1.GetOptions{})
			if err != nil {
				return err
			}
			ours := routeParent(r, wellknown.ControllerName, "gw")
			if ours == nil {
				return fmt.Errorf("no entry: %+v", r.Status.Parents)
			}
			return conditionIs(ours.Conditions, "ResolvedRefs", "False", string(gwv1.RouteReasonBackendNotFound), r.Generation)
		})
		if err := expectServed(httpC, "http://nobackend.example.com/", 500, "")(); err != nil {
			t.Log(err) // the code is the data plane's business; serving on is what matters here
		}
		if applied.Load() <= gen {
			t.Error("no configuration applied after the unservable objects")
		}
		select {
		case err := <-p.done:
			t.Fatalf("Portico stopped: %v", err)
		default:
		}
	})
}

func backendRef(service string) gwv1.HTTPBackendRef {
	return gwv1.HTTPBackendRef{BackendRef: gwv1.BackendRef{BackendObjectReference: gwv1.BackendObjectReference{
		Name: gwv1.ObjectName(service), Port: ptr.To(gwv1.PortNumber(80)),
	}}}
}

// mustCreate fails the test when the create call it is given failed:
// mustCreate(t)(client.Create(...)).
// createClassAndGateway creates what most cluster tests build on, as
// gatewayYAML does for standalone ones: the GatewayClass "portico" and the
// Gateway apps/gw, which ListenerSets of its own namespace may attach to,
// with one HTTP listener on httpPort.
func createClassAndGateway(t testing.TB, gc gatewayclient.Interface, httpPort int) {
	t.Helper()
	ctx := t.Context()
	gws := gc.GatewayV1()
	mustCreate(t)(gws.GatewayClasses().Create(ctx, &gwv1.GatewayClass{
		ObjectMeta: metav1.ObjectMeta{Name: "portico"},
		Spec:       gwv1.GatewayClassSpec{ControllerName: wellknown.ControllerName},
	}, metav1.CreateOptions{}))
	same := gwv1.NamespacesFromSame
	mustCreate(t)(gws.Gateways("apps").Create(ctx, &gwv1.Gateway{
		ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "gw"},
		Spec: gwv1.GatewaySpec{
			GatewayClassName: "portico",
			AllowedListeners: &gwv1.AllowedListeners{Namespaces: &gwv1.ListenerNamespaces{From: &same}},
			Listeners:        []gwv1.Listener{{Name: "http", Port: gwv1.PortNumber(httpPort), Protocol: gwv1.HTTPProtocolType}},
		},
	}, metav1.CreateOptions{}))
}

func mustCreate(t testing.TB) func(any, error) {
	return func(_ any, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("create: %v", err)
		}
	}
}
func TestParseNamespacedName(t *testing.T) {
	if got, err := ParseNamespacedName("portico-system/portico"); err != nil || got.Namespace != "portico-system" || got.Name != "portico" {
		t.Errorf("valid: %v, %v", got, err)
	}
	for _, bad := range []string{"portico", "/portico", "ns/", "a/b/c", ""} {
		if _, err := ParseNamespacedName(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
