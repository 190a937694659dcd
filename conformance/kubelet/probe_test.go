package kubelet

import (
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// TestReadinessProbeHTTPGet: with an httpGet readinessProbe a container is
// ready when the probe answers 200-399 on the named port, not when it
// merely listens; a 503 or a closed port is not ready.
func TestReadinessProbeHTTPGet(t *testing.T) {
	ready := false
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/readyz" || !ready {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()
	_, portStr, _ := net.SplitHostPort(srv.Listener.Addr().String())
	port, _ := strconv.Atoi(portStr)
	c := corev1.Container{
		Name:           "portico",
		Ports:          []corev1.ContainerPort{{Name: "admin", ContainerPort: int32(port)}},
		ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/readyz", Port: intstr.FromString("admin")}}},
	}
	if containerReady(c, os.Getpid(), "", "127.0.0.1") {
		t.Fatal("ready while the probe answers 503")
	}
	ready = true
	if !containerReady(c, os.Getpid(), "", "127.0.0.1") {
		t.Fatal("not ready while the probe answers 200")
	}
	if containerReady(c, 0, "", "127.0.0.1") {
		t.Fatal("ready without a process")
	}
	c.Ports[0].Name = "other"
	if containerReady(c, os.Getpid(), "", "127.0.0.1") {
		t.Fatal("ready with a probe port that names no container port")
	}
}

// TestProbeUserAgent: an HTTP probe says it is a kubelet's, as
// kube-probe/<major>.<minor>, not Go's default User-Agent; a probe that
// sets its own User-Agent keeps it.
func TestProbeUserAgent(t *testing.T) {
	agents := make(chan []string, 2)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		agents <- r.Header.Values("User-Agent")
	}))
	defer srv.Close()
	_, portStr, _ := net.SplitHostPort(srv.Listener.Addr().String())
	port, _ := strconv.Atoi(portStr)
	get := &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt(port)}
	c := corev1.Container{Name: "app", ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: get}}}
	if !containerReady(c, os.Getpid(), "", "127.0.0.1") {
		t.Fatal("not ready")
	}
	if got := <-agents; !slices.Equal(got, []string{"kube-probe/1.37"}) {
		t.Errorf("User-Agent %q, want kube-probe/1.37", got)
	}
	get.HTTPHeaders = []corev1.HTTPHeader{{Name: "user-agent", Value: "mine"}}
	if !containerReady(c, os.Getpid(), "", "127.0.0.1") {
		t.Fatal("not ready")
	}
	if got := <-agents; !slices.Equal(got, []string{"mine"}) {
		t.Errorf("User-Agent %q with the probe's own, want only it", got)
	}
}

// TestProbeUserAgentMatchesModule: probeUserAgent names the Kubernetes
// version of the k8s.io/api module the kubelet is built with (v0.X.Y is
// Kubernetes 1.X), so that an upgrade of the module cannot leave it behind.
func TestProbeUserAgentMatchesModule(t *testing.T) {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		t.Fatal("no build information in the test binary")
	}
	for _, m := range info.Deps {
		if m.Path != "k8s.io/api" {
			continue
		}
		parts := strings.SplitN(strings.TrimPrefix(m.Version, "v"), ".", 3)
		if len(parts) < 2 || parts[0] != "0" {
			t.Fatalf("k8s.io/api version %s is not v0.X.Y", m.Version)
		}
		if want := "kube-probe/1." + parts[1]; probeUserAgent != want {
			t.Errorf("probeUserAgent is %q; k8s.io/api %s makes it %q", probeUserAgent, m.Version, want)
		}
		return
	}
	t.Fatal("k8s.io/api is not among the test binary's modules")
}

// TestProjectedVolume: a projected volume gets the ServiceAccount token for
// the audience its source asks, and the keys of its ConfigMap source.
func TestProjectedVolume(t *testing.T) {
	l := testLookups(nil, map[string]*corev1.ConfigMap{"apps/kube-root-ca.crt": {Data: map[string]string{"ca.crt": "CA"}}})
	var asked string
	l.token = func(pod *corev1.Pod, src *corev1.ServiceAccountTokenProjection) (string, error) {
		asked = pod.Spec.ServiceAccountName + " " + src.Audience
		return "tok", nil
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "web-0"},
		Spec: corev1.PodSpec{ServiceAccountName: "web-dedicated", Volumes: []corev1.Volume{{Name: "token", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
			Sources: []corev1.VolumeProjection{
				{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Audience: "portico.dev/data-plane", Path: "token"}},
				{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "kube-root-ca.crt"}}},
			},
		}}}}},
	}
	dir := t.TempDir()
	paths, err := writeVolumes(pod, dir, l)
	if err != nil {
		t.Fatal(err)
	}
	if asked != "web-dedicated portico.dev/data-plane" {
		t.Fatalf("token asked as %q", asked)
	}
	for file, want := range map[string]string{"token": "tok", "ca.crt": "CA"} {
		got, err := os.ReadFile(filepath.Join(paths["token"], file))
		if err != nil || string(got) != want {
			t.Errorf("%s = %q, %v; want %q", file, got, err, want)
		}
	}
}
