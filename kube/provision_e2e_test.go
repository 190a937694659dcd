package kube

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/ptr"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
	sigsyaml "sigs.k8s.io/yaml"

	"portico.dev/portico/internal/controlplane/parameters"
	"portico.dev/portico/internal/controlplane/provision"
	"portico.dev/portico/internal/controlplane/wellknown"
	"portico.dev/portico/internal/testkit/kubetest"
	"portico.dev/portico/kube/source"
)

// provisionFixture is a real API server and controller manager (garbage
// collector, Deployment controller) with the PorticoParameters CRD of
// deploy/, and a Portico replica that provisions data planes.
type provisionFixture struct {
	*clusterFixture
	dyn dynamic.Interface
}

func newProvisionFixture(t *testing.T) *provisionFixture {
	t.Helper()
	return newProvisionFixtureOn(t, kubetest.Start(t))
}

// newProvisionFixtureOn is newProvisionFixture on a control plane of the
// caller's.
func newProvisionFixtureOn(t *testing.T, env *kubetest.Env) *provisionFixture {
	t.Helper()
	f := &clusterFixture{&kubetest.ClusterFixture{T: t, Env: env}}
	f.Kube, f.Gateway = kubetest.Clients(t, f.Env.Config)
	f.Env.StartControllerManagerT(t)
	dir := t.TempDir()
	crd, err := os.ReadFile("../deploy/porticoparameters.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "crd.yaml"), crd, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := kubetest.ApplyManifests(context.Background(), f.Env.Config, dir); err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(f.Env.Config)
	if err != nil {
		t.Fatal(err)
	}
	return &provisionFixture{clusterFixture: f, dyn: dyn}
}

func (f *provisionFixture) startPortico(identity string) *clusterInstance {
	return f.clusterFixture.startPortico(f.Env.Config, "127.0.0.1", identity, func(s *replicaSetup) {
		s.c.Dynamic = f.dyn
		s.c.DataPlanes = &provision.Settings{Image: "portico:test", ImagePullPolicy: corev1.PullNever, Controller: "portico.portico-system.svc:9443"}
	})
}

// parameters creates a PorticoParameters object from its spec in YAML.
func (f *provisionFixture) parameters(ns, name, spec string) {
	f.T.Helper()
	obj := &unstructured.Unstructured{}
	y := fmt.Sprintf("apiVersion: %s\nkind: %s\nmetadata: {name: %s, namespace: %s}\nspec: %s\n", parameters.APIVersion, parameters.Kind, name, ns, spec)
	if err := yamlToUnstructured(y, obj); err != nil {
		f.T.Fatal(err)
	}
	if _, err := f.dyn.Resource(source.ParametersResource).Namespace(ns).Create(context.Background(), obj, metav1.CreateOptions{}); err != nil {
		f.T.Fatalf("create PorticoParameters %s/%s: %v", ns, name, err)
	}
}

func (f *provisionFixture) class(name, paramsNS, paramsName string) {
	f.T.Helper()
	gc := &gwv1.GatewayClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: gwv1.GatewayClassSpec{ControllerName: "portico.dev/gateway-controller"}}
	if paramsName != "" {
		gc.Spec.ParametersRef = &gwv1.ParametersReference{Group: parameters.Group, Kind: parameters.Kind, Name: paramsName, Namespace: ptr.To(gwv1.Namespace(paramsNS))}
	}
	if _, err := f.Gateway.GatewayV1().GatewayClasses().Create(context.Background(), gc, metav1.CreateOptions{}); err != nil {
		f.T.Fatalf("create GatewayClass %s: %v", name, err)
	}
}

func (f *provisionFixture) gateway(gw *gwv1.Gateway) *gwv1.Gateway {
	f.T.Helper()
	if len(gw.Spec.Listeners) == 0 {
		gw.Spec.Listeners = []gwv1.Listener{{Name: "http", Port: 8080, Protocol: gwv1.HTTPProtocolType}}
	}
	out, err := f.Gateway.GatewayV1().Gateways(gw.Namespace).Create(context.Background(), gw, metav1.CreateOptions{})
	if err != nil {
		f.T.Fatalf("create Gateway %s/%s: %v", gw.Namespace, gw.Name, err)
	}
	return out
}

func (f *provisionFixture) updateGateway(ns, name string, mod func(*gwv1.Gateway)) {
	f.T.Helper()
	kubetest.WaitFor(f.T, 10*time.Second, "update Gateway", func() error {
		gw, err := f.Gateway.GatewayV1().Gateways(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		mod(gw)
		_, err = f.Gateway.GatewayV1().Gateways(ns).Update(context.Background(), gw, metav1.UpdateOptions{})
		return err
	})
}

func (f *provisionFixture) deployment(ns, name string) (*appsv1.Deployment, error) {
	return f.Kube.AppsV1().Deployments(ns).Get(context.Background(), name, metav1.GetOptions{})
}

// gone waits until none of a data plane's objects exists.
func (f *provisionFixture) gone(ns, name string, timeout time.Duration) {
	f.T.Helper()
	ctx := context.Background()
	kubetest.WaitFor(f.T, timeout, "data plane "+ns+"/"+name+" removed", func() error {
		for kind, get := range map[string]func() error{
			"Deployment": func() error {
				_, err := f.Kube.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
				return err
			},
			"Service": func() error { _, err := f.Kube.CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{}); return err },
			"ServiceAccount": func() error {
				_, err := f.Kube.CoreV1().ServiceAccounts(ns).Get(ctx, name, metav1.GetOptions{})
				return err
			},
			"PodDisruptionBudget": func() error {
				_, err := f.Kube.PolicyV1().PodDisruptionBudgets(ns).Get(ctx, name, metav1.GetOptions{})
				return err
			},
		} {
			if err := get(); !apierrors.IsNotFound(err) {
				return fmt.Errorf("%s still there (%v)", kind, err)
			}
		}
		return nil
	})
}

func gatewayCondition(f *provisionFixture, ns, name, typ string, status metav1.ConditionStatus, reason string) func() error {
	return func() error {
		gw, err := f.Gateway.GatewayV1().Gateways(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		return conditionIs(gw.Status.Conditions, typ, status, reason, gw.Generation)
	}
}

// TestProvisionDataPlanes: against a real API server and controller
// manager, a Gateway of a per-Gateway class gets a ServiceAccount,
// Deployment, Service and PodDisruptionBudget named <gateway>-<class>,
// owned by it, with its infrastructure labels and annotations (reserved
// keys dropped, Portico's own labels winning) and the class's parameters
// merged with its own; changing the labels rolls the pod template and
// leaves the selector; a Gateway that becomes invalid keeps its data
// plane; a restarted controller changes nothing; a Gateway moved to a
// shared class loses its objects; a deleted Gateway's objects are
// garbage-collected.
func TestProvisionDataPlanes(t *testing.T) {
	f := newProvisionFixture(t)
	ctx := context.Background()
	f.Namespace("portico-system", nil)
	f.Namespace("apps", nil)
	f.parameters("portico-system", "dedicated", `{mode: PerGateway, replicas: 1, logLevel: warn, service: {type: ClusterIP, annotations: {a: class, b: class}}, podDisruptionBudget: {maxUnavailable: 1}}`)
	f.parameters("apps", "big", `{replicas: 3, service: {annotations: {b: gateway}}}`)
	f.class("dedicated", "portico-system", "dedicated")
	f.class("portico", "", "")
	inst := f.startPortico("portico-0")

	gw := f.gateway(&gwv1.Gateway{
		ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "web"},
		Spec: gwv1.GatewaySpec{
			GatewayClassName: "dedicated",
			Infrastructure: &gwv1.GatewayInfrastructure{
				Labels:        map[gwv1.LabelKey]gwv1.LabelValue{"team": "payments", "app.kubernetes.io/managed-by": "someone"},
				Annotations:   map[gwv1.AnnotationKey]gwv1.AnnotationValue{"cost": "42", "gateway.networking.k8s.io/x": "dropped"},
				ParametersRef: &gwv1.LocalParametersReference{Group: parameters.Group, Kind: parameters.Kind, Name: "big"},
			},
			Listeners: []gwv1.Listener{{Name: "http", Port: 8080, Protocol: gwv1.HTTPProtocolType}, {Name: "alt", Port: 8081, Protocol: gwv1.HTTPProtocolType}},
		},
	})
	const name = "web-dedicated"
	var dep *appsv1.Deployment
	kubetest.WaitFor(t, 20*time.Second, "Deployment provisioned", func() (err error) {
		dep, err = f.deployment("apps", name)
		return err
	})
	svc, err := f.Kube.CoreV1().Services("apps").Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sa, err := f.Kube.CoreV1().ServiceAccounts("apps").Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pdb, err := f.Kube.PolicyV1().PodDisruptionBudgets("apps").Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range []metav1.Object{dep, svc, sa, pdb} {
		l, a := o.GetLabels(), o.GetAnnotations()
		if l["team"] != "payments" || l[provision.GatewayNameLabel] != "web" || l[provision.GatewayClassLabel] != "dedicated" || l[wellknown.ManagedByLabel] != "portico" {
			t.Errorf("%T labels = %v", o, l)
		}
		if a["cost"] != "42" || a["gateway.networking.k8s.io/x"] != "" {
			t.Errorf("%T annotations = %v", o, a)
		}
		if c := metav1.GetControllerOfNoCopy(o); c == nil || c.UID != gw.UID || c.Kind != "Gateway" {
			t.Errorf("%T owner = %v, want Gateway %s", o, o.GetOwnerReferences(), gw.UID)
		}
	}
	if got := ptr.Deref(dep.Spec.Replicas, 0); got != 3 {
		t.Errorf("replicas = %d, want the Gateway's 3", got)
	}
	if svc.Annotations["a"] != "class" || svc.Annotations["b"] != "gateway" {
		t.Errorf("Service annotations = %v, want a=class (class), b=gateway (the Gateway's)", svc.Annotations)
	}
	if len(svc.Spec.Ports) != 2 || svc.Spec.Ports[0].Port != 8080 || svc.Spec.Ports[1].Port != 8081 || svc.Spec.Type != corev1.ServiceTypeClusterIP {
		t.Errorf("Service %s ports %v, want ClusterIP with 8080 and 8081", svc.Spec.Type, svc.Spec.Ports)
	}
	if tl := dep.Spec.Template.Labels; tl["team"] != "payments" {
		t.Errorf("pod template labels = %v", tl)
	}

	// Its address is the Service's cluster IP; it is not programmed while
	// no replica is available (nothing runs pods here).
	kubetest.WaitFor(t, 20*time.Second, "Gateway addresses", func() error {
		g, err := f.Gateway.GatewayV1().Gateways("apps").Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if len(g.Status.Addresses) != 1 || g.Status.Addresses[0].Value != svc.Spec.ClusterIP {
			return fmt.Errorf("addresses %v, want the Service's %s", g.Status.Addresses, svc.Spec.ClusterIP)
		}
		return conditionIs(g.Status.Conditions, "Programmed", metav1.ConditionFalse, string(gwv1.GatewayReasonPending), g.Generation)
	})

	// New infrastructure labels roll the pod template, never the selector.
	selector := dep.Spec.Selector.String()
	f.updateGateway("apps", "web", func(g *gwv1.Gateway) { g.Spec.Infrastructure.Labels["team"] = "search" })
	kubetest.WaitFor(t, 20*time.Second, "pod template relabelled", func() error {
		d, err := f.deployment("apps", name)
		if err != nil {
			return err
		}
		if d.Spec.Template.Labels["team"] != "search" || d.Labels["team"] != "search" {
			return fmt.Errorf("labels %v / template %v", d.Labels, d.Spec.Template.Labels)
		}
		if d.Spec.Selector.String() != selector {
			return fmt.Errorf("selector changed: %s -> %s", selector, d.Spec.Selector)
		}
		dep = d
		return nil
	})

	// A typo in the Gateway's parametersRef: InvalidParameters, and the
	// running data plane stays as it is.
	f.updateGateway("apps", "web", func(g *gwv1.Gateway) { g.Spec.Infrastructure.ParametersRef.Name = "bgi" })
	kubetest.WaitFor(t, 20*time.Second, "InvalidParameters", gatewayCondition(f, "apps", "web", "Accepted", metav1.ConditionFalse, string(gwv1.GatewayReasonInvalidParameters)))
	time.Sleep(time.Second)
	if d, err := f.deployment("apps", name); err != nil || d.Generation != dep.Generation {
		t.Fatalf("an invalid Gateway's Deployment changed: %v (generation %d -> %v)", err, dep.Generation, d)
	}
	f.updateGateway("apps", "web", func(g *gwv1.Gateway) { g.Spec.Infrastructure.ParametersRef.Name = "big" })
	kubetest.WaitFor(t, 20*time.Second, "accepted again", gatewayCondition(f, "apps", "web", "Accepted", metav1.ConditionTrue, ""))

	// A new controller renders the same objects: nothing rolls.
	inst.stop()
	f.startPortico("portico-1")
	time.Sleep(3 * time.Second)
	if d, err := f.deployment("apps", name); err != nil || d.Generation != dep.Generation {
		t.Fatalf("a restarted controller changed the Deployment: %v (generation %d -> %+v)", err, dep.Generation, d.Generation)
	}

	// A name that is no Service name is cut and hashed.
	long := strings.Repeat("long", 16) + ".example"
	f.gateway(&gwv1.Gateway{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: long}, Spec: gwv1.GatewaySpec{GatewayClassName: "dedicated"}})
	longName := provision.Name(long, "dedicated")
	if errs := validation.IsDNS1035Label(longName); len(errs) > 0 || longName == long+"-dedicated" {
		t.Fatalf("Name(%s) = %s: %v", long, longName, errs)
	}
	kubetest.WaitFor(t, 20*time.Second, "hashed name provisioned", func() error {
		_, err := f.Kube.CoreV1().Services("apps").Get(ctx, longName, metav1.GetOptions{})
		return err
	})

	// Moved to a shared class: its objects go.
	f.updateGateway("apps", "web", func(g *gwv1.Gateway) { g.Spec.GatewayClassName = "portico" })
	f.gone("apps", name, 20*time.Second)

	// Deleted: the garbage collector removes what it owned.
	if err := f.Gateway.GatewayV1().Gateways("apps").Delete(ctx, long, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	f.gone("apps", longName, 60*time.Second)
}

// TestProvisionInvalidClassParameters: a class whose parametersRef does not
// resolve is not accepted (InvalidParameters), and its Gateways get no
// data plane; once the parameters exist, the class is accepted and the
// Gateway's data plane appears.
func TestProvisionInvalidClassParameters(t *testing.T) {
	f := newProvisionFixture(t)
	f.Namespace("portico-system", nil)
	f.Namespace("apps", nil)
	f.class("later", "portico-system", "later")
	f.startPortico("portico-0")
	f.gateway(&gwv1.Gateway{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "gw"}, Spec: gwv1.GatewaySpec{GatewayClassName: "later"}})
	kubetest.WaitFor(t, 20*time.Second, "class InvalidParameters", func() error {
		gc, err := f.Gateway.GatewayV1().GatewayClasses().Get(context.Background(), "later", metav1.GetOptions{})
		if err != nil {
			return err
		}
		return conditionIs(gc.Status.Conditions, "Accepted", metav1.ConditionFalse, string(gwv1.GatewayClassReasonInvalidParameters), gc.Generation)
	})
	if _, err := f.deployment("apps", "gw-later"); !apierrors.IsNotFound(err) {
		t.Fatalf("a Gateway of a class that is not accepted got a Deployment (%v)", err)
	}
	f.parameters("portico-system", "later", `{mode: PerGateway}`)
	kubetest.WaitFor(t, 20*time.Second, "Deployment after the parameters appear", func() error {
		_, err := f.deployment("apps", "gw-later")
		return err
	})
}

func yamlToUnstructured(y string, obj *unstructured.Unstructured) error {
	return sigsyaml.Unmarshal([]byte(y), &obj.Object)
}
