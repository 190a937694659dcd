package kube

import (
	"context"
	"crypto/x509"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"portico.dev/portico/internal/configstream"
	"portico.dev/portico/internal/controlplane/pipeline"
	"portico.dev/portico/internal/controlplane/provision"
	"portico.dev/portico/internal/testkit/freeport"
	"portico.dev/portico/internal/testkit/kubetest"
	"portico.dev/portico/proxy"
	"portico.dev/portico/translate"
)

// startDataPlane runs, in process, what the kubelet would run for a
// provisioned Deployment: "portico serve --gateway" with the controller
// address and certificate the Deployment names and a projected token of
// its ServiceAccount for Portico's audience, binding the Gateway's ports
// on 127.0.0.1.
func startDataPlane(t *testing.T, f *provisionFixture, ns, name string) *clusterInstance {
	t.Helper()
	return startDataPlaneAt(t, f, ns, name, "127.0.0.1", name+"-0")
}

// startDataPlaneAt is startDataPlane for the replica pod, binding the
// Gateway's ports on bind: replicas of one Gateway side by side.
func startDataPlaneAt(t *testing.T, f *provisionFixture, ns, name, bind, pod string) *clusterInstance {
	t.Helper()
	ctx := context.Background()
	dep, err := f.deployment(ns, name)
	if err != nil {
		t.Fatal(err)
	}
	c := dep.Spec.Template.Spec.Containers[0]
	var gateway, controller string
	for _, a := range c.Args {
		if v, ok := strings.CutPrefix(a, "--gateway="); ok {
			gateway = v
		}
		if v, ok := strings.CutPrefix(a, "--controller-address="); ok {
			controller = v
		}
	}
	var caPEM string
	for _, e := range c.Env {
		if e.Name == provision.ControllerCAEnv {
			caPEM = e.Value
		}
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM([]byte(caPEM)) {
		t.Fatalf("Deployment %s/%s carries no controller certificate", ns, name)
	}
	tr, err := f.Kube.CoreV1().ServiceAccounts(ns).CreateToken(ctx, dep.Spec.Template.Spec.ServiceAccountName, &authnv1.TokenRequest{
		Spec: authnv1.TokenRequestSpec{Audiences: []string{provision.TokenAudience}, ExpirationSeconds: ptr.To(int64(3600))},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(tr.Status.Token), 0o600); err != nil {
		t.Fatal(err)
	}
	gwNS, gwName, _ := strings.Cut(gateway, "/")
	key := types.NamespacedName{Namespace: gwNS, Name: gwName}
	log := zaptest.NewLogger(t).Named("dataplane")
	src := &configstream.Source{Gateway: key, Controller: controller, TokenFile: tokenFile, RootCAs: roots, Pod: pod, Log: log, Silence: 2 * time.Second}
	opts := proxy.DefaultOptions()
	opts.BindAddress = bind
	opts.DrainTimeout = time.Second
	rt := proxy.New(opts, log)
	// As "portico serve --gateway" without --session-key-file.
	src.OnSessionKey = rt.SetSessionKey
	loop := pipeline.New(pipeline.Options{Holdoff: 20 * time.Millisecond, MaxDelay: 200 * time.Millisecond, RetryAfter: 500 * time.Millisecond,
		Translate: translate.Settings{Gateway: &key}}, src, rt, nil, pipeline.Outputs{Applied: func(r pipeline.ApplyReport) { src.Acknowledge(r.Err) }}, log)
	runCtx, cancel := context.WithCancel(context.Background())
	inst := &clusterInstance{loop: loop, rt: rt, bind: bind, cancel: cancel, done: make(chan error, 1)}
	go func() { inst.done <- loop.Run(runCtx) }()
	t.Cleanup(inst.stop)
	return inst
}

func (f *provisionFixture) startController(identity string, listen string) *clusterInstance {
	return f.clusterFixture.startPortico(f.Env.Config, "127.0.0.1", identity, func(s *replicaSetup) {
		s.c.Dynamic = f.dyn
		s.c.DataPlanes = &provision.Settings{Image: "portico:test", ImagePullPolicy: corev1.PullNever, Controller: listen}
		s.c.DataPlaneListen = listen
	})
}

// TestDataPlaneServesProvisionedGateway: traffic through a provisioned
// data plane that gets its configuration from the controller's stream.
// The data plane becomes ready with its first configuration, serves the
// Gateway's route, follows a route change, keeps serving while the
// controller is stopped (a route changed meanwhile is not served yet), and
// catches up when a controller is back. It logs the time from creating
// the Gateway to its first 200 and from a route change to the data plane
// serving it.
func TestDataPlaneServesProvisionedGateway(t *testing.T) {
	kubetest.NeedNetns(t)
	f := newProvisionFixture(t)
	f.Netns = kubetest.NewNetns(t, "dataplane")
	ctx := context.Background()
	f.Namespace("portico-system", nil)
	f.Namespace("apps", nil)
	f.Service("apps", "blue", f.Backend("blue"))
	f.Service("apps", "green", f.Backend("green"))
	f.parameters("portico-system", "dedicated", `{mode: PerGateway, service: {type: ClusterIP}}`)
	f.class("dedicated", "portico-system", "dedicated")
	listen := "127.0.0.1:" + strconv.Itoa(freeport.Port(t))
	ctrl := f.startController("portico-0", listen)

	port := freeport.Port(t)
	route := &gwv1.HTTPRoute{
		ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "web"},
		Spec: gwv1.HTTPRouteSpec{
			CommonRouteSpec: gwv1.CommonRouteSpec{ParentRefs: []gwv1.ParentReference{{Name: "web"}}},
			Rules:           []gwv1.HTTPRouteRule{{BackendRefs: []gwv1.HTTPBackendRef{{BackendRef: gwv1.BackendRef{BackendObjectReference: gwv1.BackendObjectReference{Name: "blue", Port: ptr.To(gwv1.PortNumber(80))}}}}}},
		},
	}
	if _, err := f.Gateway.GatewayV1().HTTPRoutes("apps").Create(ctx, route, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	f.gateway(&gwv1.Gateway{
		ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "web"},
		Spec:       gwv1.GatewaySpec{GatewayClassName: "dedicated", Listeners: []gwv1.Listener{{Name: "http", Port: gwv1.PortNumber(port), Protocol: gwv1.HTTPProtocolType}}},
	})
	kubetest.WaitFor(t, 20*time.Second, "Deployment provisioned", func() error { _, err := f.deployment("apps", "web-dedicated"); return err })
	dp := startDataPlane(t, f, "apps", "web-dedicated")
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	url := "http://127.0.0.1:" + strconv.Itoa(port) + "/"
	kubetest.WaitFor(t, 30*time.Second, "first 200 through the data plane", expectServed(client, url, 200, "blue"))
	t.Logf("Gateway created -> first 200 through its data plane: %v", time.Since(start).Round(time.Millisecond))
	if err := dp.loop.Ready(); err != nil {
		t.Fatalf("data plane serving but not ready: %v", err)
	}
	// The controller was told what the data plane applied.
	kubetest.WaitFor(t, 10*time.Second, "acknowledgement", func() error {
		current, acked := ctrl.c.server.Version(types.NamespacedName{Namespace: "apps", Name: "web"})
		if current == "" || acked.Version != current {
			return fmt.Errorf("current %q, acknowledged %+v", current, acked)
		}
		// ... and recorded it where the leader of any replica reads it.
		d, err := f.deployment("apps", "web-dedicated")
		if err != nil {
			return err
		}
		if got := d.Annotations[provision.AppliedVersionAnnotation]; got != current {
			return fmt.Errorf("Deployment says version %q applied, want %q", got, current)
		}
		return nil
	})

	// A route change reaches the data plane.
	setBackend := func(name string) {
		kubetest.WaitFor(t, 10*time.Second, "route update", func() error {
			r, err := f.Gateway.GatewayV1().HTTPRoutes("apps").Get(ctx, "web", metav1.GetOptions{})
			if err != nil {
				return err
			}
			r.Spec.Rules[0].BackendRefs[0].Name = gwv1.ObjectName(name)
			_, err = f.Gateway.GatewayV1().HTTPRoutes("apps").Update(ctx, r, metav1.UpdateOptions{})
			return err
		})
	}
	changed := time.Now()
	setBackend("green")
	kubetest.WaitFor(t, 20*time.Second, "route change served", expectServed(client, url, 200, "green"))
	t.Logf("route changed -> served by the data plane: %v", time.Since(changed).Round(time.Millisecond))

	// Without a controller the data plane keeps serving what it has.
	ctrl.stop()
	setBackend("blue")
	for range 10 {
		if err := expectServed(client, url, 200, "green")(); err != nil {
			t.Fatalf("while the controller is away: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := dp.loop.Ready(); err != nil {
		t.Fatalf("data plane not ready while the controller is away: %v", err)
	}
	// A controller again: the data plane catches up.
	f.startController("portico-1", listen)
	kubetest.WaitFor(t, 30*time.Second, "caught up after the controller came back", expectServed(client, url, 200, "blue"))
}

// markPodsReady plays the kubelet for a Deployment's pods (nothing runs
// them here): each is Running and Ready, so the Deployment has an
// available replica.
func (f *provisionFixture) markPodsReady(ns, deployment string) {
	f.T.Helper()
	ctx := context.Background()
	kubetest.WaitFor(f.T, 20*time.Second, "a ready pod of "+deployment, func() error {
		d, err := f.deployment(ns, deployment)
		if err != nil {
			return err
		}
		sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
		if err != nil {
			return err
		}
		pods, err := f.Kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
		if err != nil {
			return err
		}
		if len(pods.Items) == 0 {
			return fmt.Errorf("no pod of Deployment %s/%s yet", ns, deployment)
		}
		for i := range pods.Items {
			p := &pods.Items[i]
			p.Status.Phase = corev1.PodRunning
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()}}
			if _, err := f.Kube.CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
				return err
			}
		}
		if d.Status.AvailableReplicas == 0 {
			return fmt.Errorf("Deployment %s/%s has no available replica yet", ns, deployment)
		}
		return nil
	})
}

// TestDataPlaneProgrammedStaysSteady: a per-Gateway Gateway becomes
// Programmed once its data plane acknowledged its configuration, and stays
// so while the controller rebuilds for changes that do not concern it: the
// version of its snapshot does not move and its data plane gets nothing
// new. The snapshot holds lists an informer cache gives in any order
// (Namespaces, routes, Services); with the order in its version, every
// rebuild made a new version, whose acknowledgement, recorded on the
// Deployment, made the next rebuild, and the Gateway never stayed
// Programmed.
func TestDataPlaneProgrammedStaysSteady(t *testing.T) {
	f := newProvisionFixture(t)
	ctx := context.Background()
	f.Namespace("portico-system", nil)
	f.Namespace("apps", nil)
	for i := range 8 {
		f.Namespace(fmt.Sprintf("team-%d", i), map[string]string{"team": strconv.Itoa(i)})
	}
	var rules []gwv1.HTTPRouteRule
	for i := range 4 {
		name := fmt.Sprintf("backend-%d", i)
		svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: name},
			Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80}}}}
		if _, err := f.Kube.CoreV1().Services("apps").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		rules = append(rules, gwv1.HTTPRouteRule{
			Matches:     []gwv1.HTTPRouteMatch{{Path: &gwv1.HTTPPathMatch{Value: ptr.To("/" + name)}}},
			BackendRefs: []gwv1.HTTPBackendRef{{BackendRef: gwv1.BackendRef{BackendObjectReference: gwv1.BackendObjectReference{Name: gwv1.ObjectName(name), Port: ptr.To(gwv1.PortNumber(80))}}}},
		})
	}
	for i, rule := range rules {
		route := &gwv1.HTTPRoute{
			ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: fmt.Sprintf("route-%d", i)},
			Spec: gwv1.HTTPRouteSpec{
				CommonRouteSpec: gwv1.CommonRouteSpec{ParentRefs: []gwv1.ParentReference{{Name: "web"}}},
				Rules:           []gwv1.HTTPRouteRule{rule},
			},
		}
		if _, err := f.Gateway.GatewayV1().HTTPRoutes("apps").Create(ctx, route, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	f.parameters("portico-system", "dedicated", `{mode: PerGateway, service: {type: ClusterIP}}`)
	f.class("dedicated", "portico-system", "dedicated")
	listen := "127.0.0.1:" + strconv.Itoa(freeport.Port(t))
	ctrl := f.startController("portico-0", listen)
	f.gateway(&gwv1.Gateway{
		ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "web"},
		Spec:       gwv1.GatewaySpec{GatewayClassName: "dedicated", Listeners: []gwv1.Listener{{Name: "http", Port: gwv1.PortNumber(freeport.Port(t)), Protocol: gwv1.HTTPProtocolType}}},
	})
	kubetest.WaitFor(t, 20*time.Second, "Deployment provisioned", func() error { _, err := f.deployment("apps", "web-dedicated"); return err })
	// No data plane runs yet: its configuration waits, and the lag
	// metrics read says for how long.
	kubetest.WaitFor(t, 10*time.Second, "a lag for the data plane not started", func() error {
		if lag, ok := ctrl.c.DataPlaneLag()["apps/web"]; !ok || lag <= 0 {
			return fmt.Errorf("lag %v (known: %v)", lag, ok)
		}
		return nil
	})
	dp := startDataPlane(t, f, "apps", "web-dedicated")
	f.markPodsReady("apps", "web-dedicated")
	kubetest.WaitFor(t, 30*time.Second, "Programmed", gatewayCondition(f, "apps", "web", "Programmed", metav1.ConditionTrue, ""))
	// Programmed was decided from the acknowledgement the lag reads too.
	if lag, ok := ctrl.c.DataPlaneLag()["apps/web"]; !ok || lag != 0 {
		t.Errorf("lag %v (known: %v) once Programmed, want 0", lag, ok)
	}

	key := types.NamespacedName{Namespace: "apps", Name: "web"}
	version, _ := ctrl.c.server.Version(key)
	applied := dp.loop.Generation()
	programmedSince := func() (metav1.Time, error) {
		g, err := f.Gateway.GatewayV1().Gateways("apps").Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			return metav1.Time{}, err
		}
		if err := conditionIs(g.Status.Conditions, "Programmed", metav1.ConditionTrue, "", g.Generation); err != nil {
			return metav1.Time{}, err
		}
		return meta.FindStatusCondition(g.Status.Conditions, "Programmed").LastTransitionTime, nil
	}
	since, err := programmedSince()
	if err != nil {
		t.Fatal(err)
	}
	// Rebuilds for objects no data plane reads: Services nothing routes
	// to, in another namespace.
	for i := range 6 {
		before := ctrl.loop.Generation()
		svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "team-0", Name: fmt.Sprintf("unrelated-%d", i)},
			Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80}}}}
		if _, err := f.Kube.CoreV1().Services("team-0").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		kubetest.WaitFor(t, 10*time.Second, "a rebuild", func() error {
			if g := ctrl.loop.Generation(); g == before {
				return fmt.Errorf("controller still at generation %d", g)
			}
			return nil
		})
		if got, _ := ctrl.c.server.Version(key); got != version {
			t.Fatalf("rebuild %d: the Gateway's snapshot went from version %s to %s though nothing of it changed", i, version, got)
		}
	}
	time.Sleep(time.Second) // what a new version would have set off
	if got := dp.loop.Generation(); got != applied {
		t.Errorf("the data plane applied %d configurations more, though nothing of its Gateway changed", got-applied)
	}
	now, err := programmedSince()
	if err != nil {
		t.Fatalf("no longer Programmed after rebuilds that did not concern it: %v", err)
	}
	if !now.Equal(&since) {
		t.Errorf("Programmed went away and back (last transition %v, was %v)", now, since)
	}
}
