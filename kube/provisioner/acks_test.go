package provisioner

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	k8stesting "k8s.io/client-go/testing"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"portico.dev/portico/internal/configstream"
	"portico.dev/portico/internal/controlplane/provision"
	"portico.dev/portico/internal/controlplane/snapshot"
	"portico.dev/portico/internal/testkit/kubetest"
)

// heldPatches is a transport that holds each PATCH whose body holds a
// version of hold until release is closed, and counts finished PATCHes.
type heldPatches struct {
	next    http.RoundTripper
	hold    string
	release chan struct{}
	done    atomic.Int32
}

func (h *heldPatches) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method != http.MethodPatch {
		return h.next.RoundTrip(r)
	}
	defer h.done.Add(1)
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return nil, err
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	if bytes.Contains(body, []byte(h.hold)) {
		<-h.release
	}
	return h.next.RoundTrip(r)
}

// TestAcknowledgementsRecordedInOrder, against the real API server: a
// data plane acknowledges a configuration and then the next one while the
// record of the first is still on its way (throttled, slow); the
// Deployment ends up saying the later was applied. Written side by side,
// the earlier write landed last, and the Gateway waited for an
// acknowledgement its data plane had already sent (the per-Gateway
// conformance run, under load).
func TestAcknowledgementsRecordedInOrder(t *testing.T) {
	env := kubetest.Start(t)
	kc := kubernetes.NewForConfigOrDie(env.Config)
	ctx := context.Background()
	if _, err := kc.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "apps"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{"app": "web"}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "web-dedicated"},
		Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: labels},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "portico", Image: "portico:test"}}},
		}},
	}
	if _, err := kc.AppsV1().Deployments("apps").Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	web := types.NamespacedName{Namespace: "apps", Name: "web"}
	hub := configstream.NewHub(nil, zaptest.NewLogger(t))
	publish := func(route string) string {
		hub.Publish([]configstream.Plane{{Gateway: web, ServiceAccount: "web-dedicated", Resources: &snapshot.Resources{
			HTTPRoutes: []*gwv1.HTTPRoute{{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: route}}},
		}}})
		v, _ := hub.Version(web)
		return v
	}
	first := publish("first")
	held := &heldPatches{hold: first, release: make(chan struct{})}
	cfg := rest.CopyConfig(env.Config)
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { held.next = rt; return held }
	slow, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	w := newAckWriter(slow, hub.Superseded, zaptest.NewLogger(t))

	w.record(web, "web-dedicated", configstream.Ack{Gateway: web.String(), Version: first})
	kubetest.WaitFor(t, 10*time.Second, "the first record under way", func() error {
		w.mu.Lock()
		defer w.mu.Unlock()
		if len(w.waiting) != 0 {
			return fmt.Errorf("not taken yet")
		}
		return nil
	})
	second := publish("second")
	w.record(web, "web-dedicated", configstream.Ack{Gateway: web.String(), Version: second})
	time.Sleep(500 * time.Millisecond) // room for a write side by side
	close(held.release)
	kubetest.WaitFor(t, 10*time.Second, "both records written", func() error {
		if n := held.done.Load(); n < 2 {
			return fmt.Errorf("%d of 2 written", n)
		}
		return nil
	})
	got, err := kc.AppsV1().Deployments("apps").Get(ctx, "web-dedicated", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if v := got.Annotations[provision.AppliedVersionAnnotation]; v != second {
		t.Errorf("Deployment says %s applied, want the later %s (the earlier was %s)", v, second, first)
	}
}

// TestAckWriterPacesHostileDataPlane: a data plane that acknowledges
// without pause, alternating versions (each a change of its Deployment,
// which every controller replica's informer then handles), costs a bounded
// rate of Deployment writes: acknowledgements that arrive while a write
// is recent replace each other, and the latest is written.
func TestAckWriterPacesHostileDataPlane(t *testing.T) {
	kc := fake.NewClientset(&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "web-dedicated"}})
	var patches atomic.Int64
	kc.PrependReactor("patch", "deployments", func(k8stesting.Action) (bool, runtime.Object, error) {
		patches.Add(1)
		return false, nil, nil
	})
	w := newAckWriter(kc, func(types.NamespacedName, string) bool { return false }, zaptest.NewLogger(t))
	gw := types.NamespacedName{Namespace: "apps", Name: "web"}
	versions := []string{"aaaaaaaaaaaaaaaaaaaaaaaa", "bbbbbbbbbbbbbbbbbbbbbbbb"}
	start := time.Now()
	for i := 0; time.Since(start) < time.Second; i++ {
		w.record(gw, "web-dedicated", configstream.Ack{Gateway: gw.String(), Version: versions[i%2]})
		time.Sleep(100 * time.Microsecond)
	}
	w.record(gw, "web-dedicated", configstream.Ack{Gateway: gw.String(), Version: "cccccccccccccccccccccccc"})
	kubetest.WaitFor(t, 10*time.Second, "the last acknowledgement written", func() error {
		d, err := kc.AppsV1().Deployments("apps").Get(context.Background(), "web-dedicated", metav1.GetOptions{})
		if err == nil && d.Annotations[provision.AppliedVersionAnnotation] != "cccccccccccccccccccccccc" {
			err = fmt.Errorf("annotation %q", d.Annotations[provision.AppliedVersionAnnotation])
		}
		return err
	})
	elapsed := time.Since(start)
	if max := int64(elapsed/minAckGap) + 2; patches.Load() > max {
		t.Errorf("%d Deployment writes in %s, want at most %d (one per %s)", patches.Load(), elapsed, max, minAckGap)
	}
}
