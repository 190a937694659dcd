package kubelet

import (
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestImagesBinary(t *testing.T) {
	images := Images{
		"registry.k8s.io/gateway-api/echo-basic": "/bin/echo-basic",
		"localhost:5000/app":                     "/bin/app",
	}
	for _, tc := range []struct {
		image string
		want  string
	}{
		{"registry.k8s.io/gateway-api/echo-basic:v1.5.1", "/bin/echo-basic"},
		{"registry.k8s.io/gateway-api/echo-basic:v1.6.0-dev.3", "/bin/echo-basic"},
		{"registry.k8s.io/gateway-api/echo-basic", "/bin/echo-basic"},
		{"registry.k8s.io/gateway-api/echo-basic@sha256:abcd", "/bin/echo-basic"},
		{"registry.k8s.io/gateway-api/echo-basic:v1@sha256:abcd", "/bin/echo-basic"},
		{"localhost:5000/app:1", "/bin/app"},
		{"localhost:5000/app", "/bin/app"},
		{"registry.k8s.io/coredns/coredns:v1.12.2", ""},
		{"registry.k8s.io/gateway-api/echo-basic-other:v1", ""},
	} {
		got, ok := images.Binary(tc.image)
		if got != tc.want || ok != (tc.want != "") {
			t.Errorf("Binary(%q) = %q, %v; want %q", tc.image, got, ok, tc.want)
		}
	}
}

func TestCheckPod(t *testing.T) {
	images := Images{"echo": "/bin/echo"}
	ok := corev1.PodSpec{
		Containers: []corev1.Container{{Name: "c", Image: "echo:1"}},
		Volumes: []corev1.Volume{
			{Name: "s", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "x"}}},
			{Name: "token", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{}}},
		},
	}
	if bad := checkPod(&corev1.Pod{Spec: ok}, images); bad != nil {
		t.Fatalf("checkPod(runnable pod) = %v", bad)
	}
	for _, tc := range []struct {
		name   string
		change func(*corev1.PodSpec)
		reason string
	}{
		{"unmapped image", func(s *corev1.PodSpec) { s.Containers[0].Image = "coredns:1" }, "ImageNotMapped"},
		{"second container unmapped", func(s *corev1.PodSpec) {
			s.Containers = append(s.Containers, corev1.Container{Name: "d", Image: "other"})
		}, "ImageNotMapped"},
		{"command", func(s *corev1.PodSpec) { s.Containers[0].Command = []string{"/bin/sh"} }, "CommandNotSupported"},
		{"init container", func(s *corev1.PodSpec) { s.InitContainers = []corev1.Container{{Name: "i", Image: "echo"}} }, "InitContainersNotSupported"},
		{"host network", func(s *corev1.PodSpec) { s.HostNetwork = true }, "HostNetworkNotSupported"},
		{"host path", func(s *corev1.PodSpec) {
			s.Volumes = append(s.Volumes, corev1.Volume{Name: "h", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}})
		}, "VolumeNotSupported"},
	} {
		spec := *ok.DeepCopy()
		tc.change(&spec)
		bad := checkPod(&corev1.Pod{Spec: spec}, images)
		if bad == nil || bad.reason != tc.reason {
			t.Errorf("%s: checkPod = %v, want reason %s", tc.name, bad, tc.reason)
		}
	}
}

func testLookups(secrets map[string]*corev1.Secret, configs map[string]*corev1.ConfigMap) lookups {
	return lookups{
		podIP:  "198.19.252.2",
		hostIP: "198.19.252.1",
		secret: func(ns, name string) (*corev1.Secret, error) {
			if s, ok := secrets[ns+"/"+name]; ok {
				return s, nil
			}
			return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "secrets"}, name)
		},
		config: func(ns, name string) (*corev1.ConfigMap, error) {
			if c, ok := configs[ns+"/"+name]; ok {
				return c, nil
			}
			return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "configmaps"}, name)
		},
	}
}

// The pod of the conformance suite's TLS backends: env from fields and
// plain values, a Secret volume with items, paths under the mount.
func tlsBackendPod() *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "infra", Name: "tls-backend-abc", UID: "u-1"},
		Spec: corev1.PodSpec{
			NodeName: "node-1",
			Containers: []corev1.Container{{
				Name:  "tls-backend",
				Image: "registry.k8s.io/gateway-api/echo-basic:v1.5.1",
				Args:  []string{"--cert=/etc/secret-volume/crt", "/etc/secret-volume/key", "/etc/secret-volumes"},
				Env: []corev1.EnvVar{
					{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
					{Name: "NAMESPACE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}},
					{Name: "POD_IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}}},
					{Name: "TLS_SERVER_CERT", Value: "/etc/secret-volume/crt"},
					{Name: "TLS_SERVER_PRIVKEY", Value: "/etc/secret-volume/key"},
					{Name: "MOUNT", Value: "/etc/secret-volume"},
					{Name: "TOKEN", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
						LocalObjectReference: corev1.LocalObjectReference{Name: "cert"}, Key: "token"}}},
				},
				VolumeMounts: []corev1.VolumeMount{{Name: "secret-volume", MountPath: "/etc/secret-volume"}},
			}},
			Volumes: []corev1.Volume{{Name: "secret-volume", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
				SecretName: "cert",
				Items:      []corev1.KeyToPath{{Key: "tls.crt", Path: "crt"}, {Key: "tls.key", Path: "key"}},
			}}}},
		},
	}
}

func TestPlanTLSBackend(t *testing.T) {
	pod := tlsBackendPod()
	secret := &corev1.Secret{Data: map[string][]byte{"tls.crt": []byte("CERT"), "tls.key": []byte("KEY"), "token": []byte("t0k")}}
	l := testLookups(map[string]*corev1.Secret{"infra/cert": secret}, nil)
	dir := t.TempDir()
	volumes, err := writeVolumes(pod, dir, l)
	if err != nil {
		t.Fatal(err)
	}
	vdir := filepath.Join(dir, "secret-volume")
	if volumes["secret-volume"] != vdir {
		t.Fatalf("volumes = %v, want secret-volume at %s", volumes, vdir)
	}
	for name, want := range map[string]string{"crt": "CERT", "key": "KEY"} {
		got, err := os.ReadFile(filepath.Join(vdir, name))
		if err != nil || string(got) != want {
			t.Errorf("%s: %q, %v; want %q", name, got, err, want)
		}
	}
	if _, err := os.Stat(filepath.Join(vdir, "tls.crt")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("tls.crt written although items select only crt and key (stat: %v)", err)
	}

	procs, err := planContainers(pod, Images{"registry.k8s.io/gateway-api/echo-basic": "/bin/echo-basic"}, volumes, l)
	if err != nil {
		t.Fatal(err)
	}
	if len(procs) != 1 || procs[0].binary != "/bin/echo-basic" || procs[0].container != "tls-backend" {
		t.Fatalf("procs = %+v", procs)
	}
	wantEnv := []string{
		"POD_NAME=tls-backend-abc",
		"NAMESPACE=infra",
		"POD_IP=198.19.252.2",
		"TLS_SERVER_CERT=" + filepath.Join(vdir, "crt"),
		"TLS_SERVER_PRIVKEY=" + filepath.Join(vdir, "key"),
		"MOUNT=" + vdir,
		"TOKEN=t0k",
	}
	for _, w := range wantEnv {
		if !slices.Contains(procs[0].env, w) {
			t.Errorf("env lacks %q: %q", w, procs[0].env)
		}
	}
	// Only whole path elements under the mount move: a flag's value too
	// ("--cert=..."), as a container would see the mount there.
	wantArgs := []string{"--cert=" + filepath.Join(vdir, "crt"), filepath.Join(vdir, "key"), "/etc/secret-volumes"}
	if !slices.Equal(procs[0].args, wantArgs) {
		t.Errorf("args = %q, want %q", procs[0].args, wantArgs)
	}
}

func TestPlanErrors(t *testing.T) {
	l := testLookups(nil, nil)
	images := Images{"registry.k8s.io/gateway-api/echo-basic": "/bin/echo-basic"}
	if _, err := writeVolumes(tlsBackendPod(), t.TempDir(), l); err == nil {
		t.Error("writeVolumes without the Secret: no error")
	}
	pod := tlsBackendPod()
	pod.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "X", ValueFrom: &corev1.EnvVarSource{
		FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.labels['app']"}}}}
	pod.Spec.Containers[0].VolumeMounts = nil
	if _, err := planContainers(pod, images, nil, l); err == nil {
		t.Error("planContainers with an unresolved fieldRef: no error")
	}
}

func TestConfigMapVolume(t *testing.T) {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p"},
		Spec: corev1.PodSpec{Volumes: []corev1.Volume{
			{Name: "conf", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
				LocalObjectReference: corev1.LocalObjectReference{Name: "cm"}}}},
			{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		}},
	}
	cm := &corev1.ConfigMap{Data: map[string]string{"Corefile": "x"}, BinaryData: map[string][]byte{"bin": {1, 2}}}
	dir := t.TempDir()
	vols, err := writeVolumes(pod, dir, testLookups(nil, map[string]*corev1.ConfigMap{"ns/cm": cm}))
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(filepath.Join(vols["conf"], "Corefile")); string(got) != "x" {
		t.Errorf("Corefile = %q", got)
	}
	if got, _ := os.ReadFile(filepath.Join(vols["conf"], "bin")); !slices.Equal(got, []byte{1, 2}) {
		t.Errorf("bin = %v", got)
	}
	if st, err := os.Stat(vols["scratch"]); err != nil || !st.IsDir() {
		t.Errorf("emptyDir: %v", err)
	}
}

func TestMountRewriteNested(t *testing.T) {
	c := corev1.Container{VolumeMounts: []corev1.VolumeMount{
		{Name: "outer", MountPath: "/data"},
		{Name: "inner", MountPath: "/data/certs/"},
		{Name: "sub", MountPath: "/conf", SubPath: "a/b"},
	}}
	m, err := mountMap(c, map[string]string{"outer": "/h/outer", "inner": "/h/inner", "sub": "/h/sub"})
	if err != nil {
		t.Fatal(err)
	}
	for in, want := range map[string]string{
		"/data/x":         "/h/outer/x",
		"/data/certs/crt": "/h/inner/crt",
		"/data/certs":     "/h/inner",
		"/conf/f":         "/h/sub/a/b/f",
		"/database":       "/database",
		"relative":        "relative",
		// A flag's value names a path as well.
		"--token=/data/certs/t": "--token=/h/inner/t",
		"--mode=/database":      "--mode=/database",
		"a=/data/x":             "a=/data/x",
	} {
		if got := m.rewrite(in); got != want {
			t.Errorf("rewrite(%q) = %q, want %q", in, got, want)
		}
	}
	if _, err := mountMap(corev1.Container{VolumeMounts: []corev1.VolumeMount{{Name: "nope", MountPath: "/x"}}}, nil); err == nil {
		t.Error("mount of an unknown volume: no error")
	}
}

func TestAllocate(t *testing.T) {
	n := &Network{Prefix: netip.MustParsePrefix("198.19.252.0/29")}
	n.used = map[netip.Addr]bool{n.HostAddr(): true}
	if got := lastAddr(n.Prefix); got != netip.MustParseAddr("198.19.252.7") {
		t.Fatalf("lastAddr = %v", got)
	}
	if got := lastAddr(netip.MustParsePrefix("198.19.252.0/22")); got != netip.MustParseAddr("198.19.255.255") {
		t.Fatalf("lastAddr(/22) = %v", got)
	}
	var got []string
	for {
		a, err := n.allocate()
		if err != nil {
			break
		}
		got = append(got, a.String())
	}
	// .0 is the network, .1 the host, .7 the broadcast address.
	want := []string{"198.19.252.2", "198.19.252.3", "198.19.252.4", "198.19.252.5", "198.19.252.6"}
	if !slices.Equal(got, want) {
		t.Fatalf("allocated %v, want %v", got, want)
	}
	n.release(netip.MustParseAddr("198.19.252.4"))
	if a, err := n.allocate(); err != nil || a.String() != "198.19.252.4" {
		t.Errorf("after release: %v, %v; want 198.19.252.4", a, err)
	}
}

// TestAllocateRoundRobin: a freed address is handed out again only after
// every other free one, so that the host's neighbour entry naming the old
// pod's MAC is not taken for the new pod's.
func TestAllocateRoundRobin(t *testing.T) {
	n := &Network{Prefix: netip.MustParsePrefix("198.19.252.0/29")}
	n.used = map[netip.Addr]bool{n.HostAddr(): true}
	alloc := func() string {
		t.Helper()
		a, err := n.allocate()
		if err != nil {
			t.Fatal(err)
		}
		return a.String()
	}
	free := func(a string) { n.release(netip.MustParseAddr(a)) }
	var got []string
	got = append(got, alloc(), alloc()) // .2 .3
	free("198.19.252.2")
	got = append(got, alloc()) // not .2 again: .4
	free("198.19.252.3")
	got = append(got, alloc(), alloc()) // .5 .6, then the end of the range
	got = append(got, alloc())          // wraps to the first free: .2
	free("198.19.252.5")
	got = append(got, alloc()) // after .2: .3 is free again
	want := []string{"198.19.252.2", "198.19.252.3", "198.19.252.4", "198.19.252.5", "198.19.252.6", "198.19.252.2", "198.19.252.3"}
	if !slices.Equal(got, want) {
		t.Fatalf("allocated %v, want %v", got, want)
	}
	// .5 is the only free address left, wherever the search starts.
	if a := alloc(); a != "198.19.252.5" {
		t.Errorf("last free: %s, want 198.19.252.5", a)
	}
	if a, err := n.allocate(); err == nil {
		t.Errorf("full range handed out %v", a)
	}
}
