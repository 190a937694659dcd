package kube

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/metadata"
	"k8s.io/utils/ptr"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
	"sigs.k8s.io/yaml"

	"portico.dev/portico/internal/controlplane/wellknown"
	"portico.dev/portico/internal/testkit/freeport"
	"portico.dev/portico/internal/testkit/kubetest"
	"portico.dev/portico/kube/acmecerts"
	"portico.dev/portico/kube/secretstorage"
	"portico.dev/portico/kube/source"
	"portico.dev/portico/translate"
)

// deployObjects reads the objects of the kustomize base in dir. The base
// only lists resources, which is all this reading understands: anything
// else in kustomization.yaml fails the test rather than be ignored.
func deployObjects(t testing.TB, dir string) []*unstructured.Unstructured {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var k struct {
		APIVersion string   `json:"apiVersion"`
		Kind       string   `json:"kind"`
		Resources  []string `json:"resources"`
	}
	if err := yaml.UnmarshalStrict(raw, &k); err != nil {
		t.Fatalf("kustomization.yaml: %v", err)
	}
	if k.Kind != "Kustomization" || len(k.Resources) == 0 {
		t.Fatalf("kustomization.yaml: kind %q with %d resources", k.Kind, len(k.Resources))
	}
	var objs []*unstructured.Unstructured
	for _, name := range k.Resources {
		f, err := os.Open(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		dec := utilyaml.NewYAMLOrJSONDecoder(f, 4096)
		for {
			var m map[string]any
			if err := dec.Decode(&m); err != nil {
				if errors.Is(err, io.EOF) {
					break
				}
				t.Fatalf("%s: %v", name, err)
			}
			if len(m) > 0 {
				objs = append(objs, &unstructured.Unstructured{Object: m})
			}
		}
		f.Close()
	}
	return objs
}

// TestDeployManifests applies deploy/ to a real API server, then runs
// Portico with exactly the RBAC of its ServiceAccount: it serves and writes
// status, and whatever it was not granted is refused.
func TestDeployManifests(t *testing.T) {
	f := newClusterFixture(t)
	ctx := t.Context()
	objs := deployObjects(t, "../deploy")
	kubetest.ServerSideApply(t, f.Env.Config, objs)
	// Applying again changes nothing and must be accepted as well.
	kubetest.ServerSideApply(t, f.Env.Config, deployObjects(t, "../deploy"))

	dep, err := f.Kube.AppsV1().Deployments("portico-system").Get(ctx, "portico", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	checkDeployment(t, dep)
	if _, err := f.Kube.PolicyV1().PodDisruptionBudgets("portico-system").Get(ctx, "portico", metav1.GetOptions{}); err != nil {
		t.Errorf("PodDisruptionBudget: %v", err)
	}
	front, err := f.Kube.CoreV1().Services("portico-system").Get(ctx, "portico", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if front.Spec.Type != corev1.ServiceTypeLoadBalancer {
		t.Errorf("Service type %s", front.Spec.Type)
	}

	// What a user creates: a Gateway of the deployed class, a route, a backend.
	f.Namespace("apps", nil)
	f.Service("apps", "svc", f.Backend("backend"))
	port := int32(freeport.Port(t))
	gws := f.Gateway.GatewayV1()
	mustCreate(t)(gws.Gateways("apps").Create(ctx, &gwv1.Gateway{
		ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "gw"},
		Spec: gwv1.GatewaySpec{
			GatewayClassName: "portico",
			Listeners:        []gwv1.Listener{{Name: "http", Port: gwv1.PortNumber(port), Protocol: gwv1.HTTPProtocolType}},
		},
	}, metav1.CreateOptions{}))
	mustCreate(t)(gws.HTTPRoutes("apps").Create(ctx, &gwv1.HTTPRoute{
		ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "r"},
		Spec: gwv1.HTTPRouteSpec{
			CommonRouteSpec: gwv1.CommonRouteSpec{ParentRefs: []gwv1.ParentReference{{Name: "gw"}}},
			Hostnames:       []gwv1.Hostname{"app.example.com"},
			Rules:           []gwv1.HTTPRouteRule{{BackendRefs: []gwv1.HTTPBackendRef{backendRef("svc")}}},
		},
	}, metav1.CreateOptions{}))

	sa := f.Env.ImpersonatingConfig("system:serviceaccount:portico-system:portico")
	p := f.startPortico(sa, "127.0.0.1", "portico-0", func(s *replicaSetup) {
		s.opts.Translate.Shared = &translate.SharedAddresses{Service: types.NamespacedName{Namespace: "portico-system", Name: "portico"}}
	})
	kubetest.WaitFor(t, 10*time.Second, "leading", func() error {
		if !p.c.Leading() {
			return errors.New("not leading")
		}
		return nil
	})
	kubetest.WaitFor(t, 10*time.Second, "traffic", expectServed(httpClient(p.addr(port)), "http://app.example.com/", 200, "backend"))
	kubetest.WaitFor(t, 10*time.Second, "statuses", func() error {
		gc, err := gws.GatewayClasses().Get(ctx, "portico", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if err := conditionIs(gc.Status.Conditions, "SupportedVersion", "True", "SupportedVersion", gc.Generation); err != nil {
			return fmt.Errorf("GatewayClass: %w", err)
		}
		gw, err := gws.Gateways("apps").Get(ctx, "gw", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if err := conditionIs(gw.Status.Conditions, "Programmed", "True", "Programmed", gw.Generation); err != nil {
			return fmt.Errorf("Gateway: %w", err)
		}
		if len(gw.Status.Addresses) != 1 || gw.Status.Addresses[0].Value != front.Spec.ClusterIP {
			return fmt.Errorf("Gateway addresses %+v, want %s", gw.Status.Addresses, front.Spec.ClusterIP)
		}
		r, err := gws.HTTPRoutes("apps").Get(ctx, "r", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if ours := routeParent(r, wellknown.ControllerName, "gw"); ours == nil {
			return errors.New("no route status")
		}
		return nil
	})
	lease, err := f.Kube.CoordinationV1().Leases("portico-system").Get(ctx, "portico", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("leader Lease: %v", err)
	}
	if ptr.Deref(lease.Spec.HolderIdentity, "") != "portico-0" {
		t.Errorf("Lease held by %v", lease.Spec.HolderIdentity)
	}
	kubetest.WaitFor(t, 10*time.Second, "leader election Event", func() error {
		events, err := f.Kube.CoreV1().Events("portico-system").List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		for _, e := range events.Items {
			if e.Reason == "LeaderElection" && e.InvolvedObject.Kind == "Lease" {
				return nil
			}
		}
		return fmt.Errorf("no LeaderElection event among %d", len(events.Items))
	})

	// Everything outside the granted RBAC is refused.
	kc, gc := kubetest.Clients(t, sa)
	md, err := metadata.NewForConfig(sa)
	if err != nil {
		t.Fatal(err)
	}
	gw, err := gws.Gateways("apps").Get(ctx, "gw", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	gw.Spec.Listeners[0].Port++
	refused := map[string]error{}
	_, refused["get a Secret"] = kc.CoreV1().Secrets("apps").Get(ctx, "any", metav1.GetOptions{})
	refused["delete a Secret"] = kc.CoreV1().Secrets("apps").Delete(ctx, "any", metav1.DeleteOptions{})
	_, refused["update a Gateway's spec"] = gc.GatewayV1().Gateways("apps").Update(ctx, gw, metav1.UpdateOptions{})
	refused["delete an HTTPRoute"] = gc.GatewayV1().HTTPRoutes("apps").Delete(ctx, "r", metav1.DeleteOptions{})
	_, refused["create a GatewayClass"] = gc.GatewayV1().GatewayClasses().Create(ctx, &gwv1.GatewayClass{
		ObjectMeta: metav1.ObjectMeta{Name: "mine"}, Spec: gwv1.GatewayClassSpec{ControllerName: wellknown.ControllerName},
	}, metav1.CreateOptions{})
	_, refused["create a Lease elsewhere"] = kc.CoordinationV1().Leases("apps").Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "portico"}}, metav1.CreateOptions{})
	_, refused["update a Lease elsewhere"] = kc.CoordinationV1().Leases("apps").Update(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "other", Namespace: "apps"}}, metav1.UpdateOptions{})
	_, refused["list Pods"] = kc.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	_, refused["get a ConfigMap"] = kc.CoreV1().ConfigMaps("apps").Get(ctx, "any", metav1.GetOptions{})
	_, refused["update a ConfigMap"] = kc.CoreV1().ConfigMaps("apps").Update(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "any", Namespace: "apps"}}, metav1.UpdateOptions{})
	_, refused["update a BackendTLSPolicy's spec"] = gc.GatewayV1().BackendTLSPolicies("apps").Update(ctx, &gwv1.BackendTLSPolicy{ObjectMeta: metav1.ObjectMeta{Name: "any", Namespace: "apps"}}, metav1.UpdateOptions{})
	_, refused["list Events"] = kc.CoreV1().Events("apps").List(ctx, metav1.ListOptions{})
	refused["delete an Event"] = kc.CoreV1().Events("apps").Delete(ctx, "any", metav1.DeleteOptions{})
	_, refused["read an unrelated CRD"] = md.Resource(source.CRDResource).Get(ctx, "tcproutes."+gwv1.GroupName, metav1.GetOptions{})
	_, refused["update a Service"] = kc.CoreV1().Services("portico-system").Update(ctx, front, metav1.UpdateOptions{})
	for what, err := range refused {
		if !apierrors.IsForbidden(err) {
			t.Errorf("%s: %v, want Forbidden", what, err)
		}
	}

	// What ACME needs is granted: its state (Secrets and Lease locks) in
	// Portico's namespace, and writing a listener's Secret anywhere.
	storage, err := secretstorage.New(kc, secretstorage.Options{Namespace: "portico-system", Identity: "portico-0"})
	if err != nil {
		t.Fatal(err)
	}
	if err := storage.Lock(ctx, "acme-rbac"); err != nil {
		t.Errorf("ACME storage lock: %v", err)
	} else if err := storage.Store(ctx, "acme/rbac", []byte("x")); err != nil {
		t.Errorf("ACME storage store: %v", err)
	} else if err := storage.Delete(ctx, "acme/rbac"); err != nil {
		t.Errorf("ACME storage delete: %v", err)
	} else if err := storage.Unlock(ctx, "acme-rbac"); err != nil {
		t.Errorf("ACME storage unlock: %v", err)
	}
	// ACME outcomes are recorded on the ListenerSet or Gateway, in its
	// namespace.
	if _, err := kc.CoreV1().Events("apps").Create(ctx, &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Name: "ls.acme"},
		InvolvedObject: corev1.ObjectReference{APIVersion: gwv1.GroupVersion.String(), Kind: "ListenerSet", Name: "ls", Namespace: "apps"},
		Reason:         acmecerts.ReasonCertificateIssued, Type: corev1.EventTypeNormal,
	}, metav1.CreateOptions{}); err != nil {
		t.Errorf("create an ACME Event on a ListenerSet: %v", err)
	}
	listenerSecret, err := kc.CoreV1().Secrets("apps").Create(ctx, translate.ManagedSecret(translate.ACMECertificate{Hostname: "x.example.com", Secret: nn("apps", "x-tls")}, nil, nil), metav1.CreateOptions{})
	if err != nil {
		t.Errorf("create a listener's ACME Secret: %v", err)
	} else if _, err := kc.CoreV1().Secrets("apps").Update(ctx, listenerSecret, metav1.UpdateOptions{}); err != nil {
		t.Errorf("update a listener's ACME Secret: %v", err)
	}
}

// checkDeployment checks what the Deployment must have for Portico to run
// safely and that the API server does not enforce by itself.
func checkDeployment(t *testing.T, dep *appsv1.Deployment) {
	t.Helper()
	spec := dep.Spec.Template.Spec
	if ptr.Deref(dep.Spec.Replicas, 0) != 2 {
		t.Errorf("replicas %v", dep.Spec.Replicas)
	}
	if spec.ServiceAccountName != "portico" {
		t.Errorf("serviceAccountName %q", spec.ServiceAccountName)
	}
	if spec.SecurityContext == nil || !ptr.Deref(spec.SecurityContext.RunAsNonRoot, false) {
		t.Error("pod may run as root")
	}
	if len(spec.Containers) != 1 {
		t.Fatalf("%d containers", len(spec.Containers))
	}
	c := spec.Containers[0]
	sc := c.SecurityContext
	if sc == nil || !ptr.Deref(sc.ReadOnlyRootFilesystem, false) || ptr.Deref(sc.AllowPrivilegeEscalation, true) {
		t.Errorf("container security context %+v", sc)
	}
	if c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet == nil || c.ReadinessProbe.HTTPGet.Path != "/readyz" {
		t.Errorf("readiness probe %+v", c.ReadinessProbe)
	}
	if c.LivenessProbe == nil || c.LivenessProbe.HTTPGet == nil || c.LivenessProbe.HTTPGet.Path != "/healthz" {
		t.Errorf("liveness probe %+v", c.LivenessProbe)
	}
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() {
		t.Errorf("resource requests %v", c.Resources.Requests)
	}
	if spec.TerminationGracePeriodSeconds == nil || *spec.TerminationGracePeriodSeconds <= 30 {
		t.Errorf("terminationGracePeriodSeconds %v does not cover the 30s drain", spec.TerminationGracePeriodSeconds)
	}
}
