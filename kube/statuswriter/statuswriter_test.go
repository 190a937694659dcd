package statuswriter

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
	gatewayclient "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"

	"portico.dev/portico/internal/controlplane/status"
	"portico.dev/portico/internal/controlplane/wellknown"
	"portico.dev/portico/internal/testkit/kubetest"
	"portico.dev/portico/kube/source"
)

const otherController gwv1.GatewayController = "example.net/other-controller"

// TestConflictKeepsOtherEntries: Portico's update is based on a copy that
// another controller's write has made stale; the conflict is retried on a
// fresh copy and the other controller's new entry survives.
func TestConflictKeepsOtherEntries(t *testing.T) {
	env := kubetest.Start(t)
	ctx := t.Context()
	kc := kubernetes.NewForConfigOrDie(env.Config)
	gws := gatewayclient.NewForConfigOrDie(env.Config).GatewayV1()
	if _, err := kc.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "apps"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	route, err := gws.HTTPRoutes("apps").Create(ctx, &gwv1.HTTPRoute{
		ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "plain"},
		Spec: gwv1.HTTPRouteSpec{
			CommonRouteSpec: gwv1.CommonRouteSpec{ParentRefs: []gwv1.ParentReference{{Name: "gw"}, {Name: "other-gw"}}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	otherEntry := func(section gwv1.SectionName) gwv1.RouteParentStatus {
		ref := gwv1.ParentReference{Group: ptr.To(gwv1.Group(gwv1.GroupName)), Kind: ptr.To(gwv1.Kind("Gateway")), Name: "other-gw"}
		if section != "" {
			ref.SectionName = &section
		}
		return gwv1.RouteParentStatus{
			ParentRef:      ref,
			ControllerName: otherController,
			Conditions: []metav1.Condition{{
				Type: "Accepted", Status: metav1.ConditionTrue, Reason: "Accepted", ObservedGeneration: 1,
				LastTransitionTime: metav1.NewTime(time.Now().Truncate(time.Second)),
			}},
		}
	}
	route.Status.Parents = []gwv1.RouteParentStatus{otherEntry("")}
	stale, err := gws.HTTPRoutes("apps").UpdateStatus(ctx, route, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The other controller writes again, after Portico read its copy.
	fresh := stale.DeepCopy()
	fresh.Status.Parents = append(fresh.Status.Parents, otherEntry("http"))
	if _, err := gws.HTTPRoutes("apps").UpdateStatus(ctx, fresh, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	gwRef := gwv1.ParentReference{Group: ptr.To(gwv1.Group(gwv1.GroupName)), Kind: ptr.To(gwv1.Kind("Gateway")), Name: "gw"}
	computed := []gwv1.RouteParentStatus{{
		ParentRef:      gwRef,
		ControllerName: wellknown.ControllerName,
		Conditions: []metav1.Condition{{
			Type: "Accepted", Status: metav1.ConditionTrue, Reason: "Accepted", ObservedGeneration: stale.Generation,
			Message: "written by the conflict test",
		}},
	}}
	var conflicts atomic.Int64
	w := New(nil, source.Listers{}, wellknown.ControllerName, zaptest.NewLogger(t), Options{Observe: func(kind, result string) {
		if result == "conflict" {
			conflicts.Add(1)
		}
	}})
	now := metav1.NewTime(time.Now().Truncate(time.Second))
	key := statusKey{"HTTPRoute", types.NamespacedName{Namespace: "apps", Name: "plain"}}
	wrote, err := writeStatus(ctx, w, key, objectVersion{}, stale,
		func(ctx context.Context) (*gwv1.HTTPRoute, error) {
			return gws.HTTPRoutes("apps").Get(ctx, "plain", metav1.GetOptions{})
		},
		func(o *gwv1.HTTPRoute) (*gwv1.HTTPRoute, bool) {
			return status.MergeHTTPRoute(o, computed, wellknown.ControllerName, now)
		},
		func(ctx context.Context, o *gwv1.HTTPRoute) (*gwv1.HTTPRoute, error) {
			return gws.HTTPRoutes("apps").UpdateStatus(ctx, o, metav1.UpdateOptions{})
		})
	if err != nil || !wrote {
		t.Fatalf("writeStatus = %v, %v", wrote, err)
	}
	if conflicts.Load() != 1 {
		t.Errorf("%d conflicts, want 1", conflicts.Load())
	}
	if s := w.Stats(); s.Writes != 1 {
		t.Errorf("%d writes counted, want 1", s.Writes)
	}
	got, err := gws.HTTPRoutes("apps").Get(ctx, "plain", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var others, ours int
	for _, p := range got.Status.Parents {
		switch {
		case p.ControllerName == otherController:
			others++
		case p.ControllerName == wellknown.ControllerName && p.Conditions[0].Message == "written by the conflict test":
			ours++
		}
	}
	if others != 2 || ours != 1 {
		t.Errorf("after a conflict: %+v", got.Status.Parents)
	}
}
