package provisioner

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"portico.dev/portico/internal/controlplane/provision"
	"portico.dev/portico/internal/controlplane/snapshot"
)

// TestCollidingDataPlaneNames is an attack by a tenant who may create
// Gateways in a namespace it shares and pick among per-Gateway classes:
// Gateway "web" of class "public-portico" has its data plane objects
// (ServiceAccount, Service, Deployment) named "web-public-portico"; a
// Gateway "web-public" of class "portico" maps to the same name. Had
// both been provisioned, the later apply would have taken the first's
// Service and Deployment (its traffic) over, and the hub would have
// handed either Gateway's snapshot to the one ServiceAccount. The
// Gateway created first keeps the name; the other gets no data plane
// and no snapshot.
func TestCollidingDataPlaneNames(t *testing.T) {
	t0 := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	gateway := func(name, class string, created metav1.Time) provision.Input {
		return provision.Input{Accepted: true, ClassName: class, Ports: []provision.Port{{Port: 80}},
			Gateway: &gwv1.Gateway{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: name, UID: types.UID("uid-" + name), CreationTimestamp: created},
				Spec: gwv1.GatewaySpec{GatewayClassName: gwv1.ObjectName(class)}}}
	}
	victim := gateway("web", "public-portico", t0)
	attacker := gateway("web-public", "portico", metav1.NewTime(t0.Add(time.Minute)))
	if provision.Name("web", "public-portico") != provision.Name("web-public", "portico") {
		t.Fatal("the names no longer collide: the test needs another pair")
	}
	for _, inputs := range [][]provision.Input{{victim, attacker}, {attacker, victim}} {
		planes := planes(inputs, &snapshot.Resources{})
		if len(planes) != 1 || planes[0].Gateway.Name != "web" {
			t.Errorf("planes published: %v, want only apps/web's", planes)
		}
		kc := fake.NewClientset()
		var applied []string
		kc.PrependReactor("patch", "deployments", func(a k8stesting.Action) (bool, runtime.Object, error) {
			applied = append(applied, string(a.(k8stesting.PatchAction).GetPatch()))
			return true, nil, nil
		})
		p := New(kc, provision.Settings{Image: "portico:test", Controller: "c:9443"}, func() bool { return true }, zaptest.NewLogger(t))
		_ = p.reconcile(context.Background(), &dataPlaneBatch{inputs: inputs, res: &snapshot.Resources{}})
		if len(applied) != 1 || !strings.Contains(applied[0], "apps/web\"") {
			t.Errorf("%d Deployments applied, want one for apps/web: %.300q", len(applied), applied)
		}
	}
}
