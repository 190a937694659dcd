package kubelet

import (
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
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
