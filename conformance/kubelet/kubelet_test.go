package kubelet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"portico.dev/portico/internal/testkit/kubetest"
)

// serverEnv makes the test binary, started as a pod's container, serve
// instead of running tests: it stands in for an image.
const serverEnv = "PROCESS_KUBELET_TEST_SERVER"

func TestMain(m *testing.M) {
	if os.Getenv(serverEnv) == "1" {
		serve()
		return
	}
	os.Exit(m.Run())
}

// serve answers "<POD_NAME> <NAMESPACE> <contents of $FILE>" on :8080 on all
// addresses (the file read for each request), and exits with status 3 on
// /exit.
func serve() {
	http.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		body, err := os.ReadFile(os.Getenv("FILE"))
		if err != nil {
			body = []byte("no file: " + err.Error())
		}
		fmt.Printf("served %s\n", r.URL.Path)
		fmt.Fprintf(w, "%s %s %s", os.Getenv("POD_NAME"), os.Getenv("NAMESPACE"), body)
	})
	http.HandleFunc("/exit", func(http.ResponseWriter, *http.Request) { os.Exit(3) })
	if err := http.ListenAndServe(":8080", nil); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

const (
	testImage     = "test.invalid/kubelet-test-server:v1"
	unmappedImage = "test.invalid/nothing-runs-this:v1"
	testNetns     = "pkl-test-"
	testNS        = "kubelet-test"
)

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("the process kubelet makes network namespaces and a bridge: run as root")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Fatal("the ip command (iproute2) is missing; run hack/install-deps.sh")
	}
}

// startKubelet runs a control plane with the controllers that turn
// Deployments into Pods and Pods into EndpointSlices, and a Kubelet on a
// bridge of its own.
func startKubelet(t *testing.T, mods ...func(*Config)) (kubernetes.Interface, *Network) {
	t.Helper()
	needRoot(t)
	env := kubetest.StartWith(t, kubetest.Options{
		NoCRDs: true,
		// Service addresses stay clear of the pod range below.
		APIServerArgs: []string{"--service-cluster-ip-range=198.19.0.0/17"},
	})
	env.StartControllerManagerT(t)
	client, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}

	network := &Network{Bridge: "pkl-test0", Prefix: netip.MustParsePrefix("198.19.248.0/24"), NetnsPrefix: testNetns}
	if err := network.SetUp(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := network.TearDown(context.Background()); err != nil {
			t.Errorf("tear down network: %v", err)
		}
	})
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{
		Client:   client,
		NodeName: "process-node",
		Network:  network,
		Images:   Images{"test.invalid/kubelet-test-server": self},
		Dir:      t.TempDir(),
		Logf:     t.Logf,
	}
	for _, mod := range mods {
		mod(&cfg)
	}
	k, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := k.Run(ctx); err != nil {
			t.Errorf("kubelet: %v", err)
		}
	})
	t.Cleanup(func() {
		cancel()
		wg.Wait()
	})
	if err := WaitForNode(t.Context(), client, "process-node"); err != nil {
		t.Fatalf("node never became Ready: %v", err)
	}
	if _, err := client.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: testNS}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return client, network
}

func deployment(name, image string, replicas int32) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: name},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					Containers: []corev1.Container{{
						Name:  "server",
						Image: image,
						Env: []corev1.EnvVar{
							{Name: serverEnv, Value: "1"},
							{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
							{Name: "NAMESPACE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}},
							{Name: "FILE", Value: "/etc/secret-volume/key"},
						},
						VolumeMounts: []corev1.VolumeMount{{Name: "secret-volume", MountPath: "/etc/secret-volume"}},
					}},
					Volumes: []corev1.Volume{{Name: "secret-volume", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
						SecretName: "cert",
						Items:      []corev1.KeyToPath{{Key: "tls.key", Path: "key"}},
					}}}},
				},
			},
		},
	}
}

func TestDeploymentBecomesReachableEndpoints(t *testing.T) {
	client, network := startKubelet(t)
	ctx := t.Context()
	mustCreate(t, func() error {
		_, err := client.CoreV1().Secrets(testNS).Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: "cert"},
			Data:       map[string][]byte{"tls.key": []byte("the-key"), "tls.crt": []byte("the-cert")},
		}, metav1.CreateOptions{})
		return err
	})
	mustCreate(t, func() error {
		_, err := client.AppsV1().Deployments(testNS).Create(ctx, deployment("web", testImage, 2), metav1.CreateOptions{})
		return err
	})
	mustCreate(t, func() error {
		_, err := client.CoreV1().Services(testNS).Create(ctx, &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: "web"},
			Spec: corev1.ServiceSpec{
				Selector: map[string]string{"app": "web"},
				Ports:    []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}},
			},
		}, metav1.CreateOptions{})
		return err
	})

	addrs := readyEndpoints(t, client, "web", 2)
	pods, err := client.CoreV1().Pods(testNS).List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
	if err != nil {
		t.Fatal(err)
	}
	byIP := map[string]string{}
	for _, p := range pods.Items {
		byIP[p.Status.PodIP] = p.Name
		if !network.Prefix.Contains(netip.MustParseAddr(p.Status.PodIP)) {
			t.Errorf("pod %s has IP %s outside %v", p.Name, p.Status.PodIP, network.Prefix)
		}
	}
	for _, a := range addrs {
		name, ok := byIP[a]
		if !ok {
			t.Fatalf("endpoint %s is no pod's IP (pods: %v)", a, byIP)
		}
		// The host reaches each pod at its own address, and the pod's
		// process sees its own name, namespace and Secret volume.
		want := name + " " + testNS + " the-key"
		if got := get(t, "http://"+net.JoinHostPort(a, "8080")+"/"); got != want {
			t.Errorf("pod %s at %s answered %q, want %q", name, a, got, want)
		}
	}

	// The API server's pods/log reaches the kubelet for a container's
	// output, by time as the suite asks for it (mirrored requests).
	name := pods.Items[0].Name
	logs, err := client.CoreV1().Pods(testNS).GetLogs(name, &corev1.PodLogOptions{Container: "server"}).Do(ctx).Raw()
	if err != nil || !strings.Contains(string(logs), "served /\n") {
		t.Errorf("logs of %s: %q, %v; want the line the request wrote", name, logs, err)
	}
	later := metav1.NewTime(time.Now().Add(time.Hour))
	logs, err = client.CoreV1().Pods(testNS).GetLogs(name, &corev1.PodLogOptions{Container: "server", SinceTime: &later}).Do(ctx).Raw()
	if err != nil || len(logs) != 0 {
		t.Errorf("logs of %s since an hour from now: %q, %v; want none", name, logs, err)
	}

	// A process that exits is started again, and the Pod is Ready again
	// once it listens.
	victim := pods.Items[0]
	_, _ = http.Get("http://" + net.JoinHostPort(victim.Status.PodIP, "8080") + "/exit")
	waitPod(t, client, victim.Name, "restarted and Ready", func(p *corev1.Pod) bool {
		return len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].RestartCount == 1 && podReady(p)
	})
	if got := get(t, "http://"+net.JoinHostPort(victim.Status.PodIP, "8080")+"/"); !strings.HasPrefix(got, victim.Name+" ") {
		t.Errorf("restarted pod answered %q", got)
	}

	// Deleting the Deployment deletes the Pods: their processes end, their
	// namespaces go, and the kubelet lets the objects go.
	before := podNetns(t)
	if len(before) != 2 {
		t.Fatalf("pod namespaces before deletion: %v, want 2", before)
	}
	var pids []string
	for _, p := range pods.Items {
		cur, err := client.CoreV1().Pods(testNS).Get(ctx, p.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		pids = append(pids, strings.TrimPrefix(cur.Status.ContainerStatuses[0].ContainerID, "process://"))
	}
	bg := metav1.DeletePropagationForeground
	if err := client.AppsV1().Deployments(testNS).Delete(ctx, "web", metav1.DeleteOptions{PropagationPolicy: &bg}); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		l, err := client.CoreV1().Pods(testNS).List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
		return err == nil && len(l.Items) == 0, nil
	}); err != nil {
		t.Fatalf("pods still exist after the Deployment was deleted: %v", err)
	}
	if left := podNetns(t); len(left) != 0 {
		t.Errorf("namespaces left after the pods went: %v", left)
	}
	for _, pid := range pids {
		if _, err := os.Stat("/proc/" + pid); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("process %s still exists after its pod was deleted", pid)
		}
	}
}

func TestUnmappedImageStaysPending(t *testing.T) {
	client, _ := startKubelet(t)
	mustCreate(t, func() error {
		_, err := client.AppsV1().Deployments(testNS).Create(t.Context(), deployment("dns", unmappedImage, 1), metav1.CreateOptions{})
		return err
	})
	var name string
	if err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		l, err := client.CoreV1().Pods(testNS).List(ctx, metav1.ListOptions{LabelSelector: "app=dns"})
		if err != nil || len(l.Items) == 0 {
			return false, nil
		}
		name = l.Items[0].Name
		return true, nil
	}); err != nil {
		t.Fatalf("no pod: %v", err)
	}
	p := waitPod(t, client, name, "waiting with ImageNotMapped", func(p *corev1.Pod) bool {
		cs := p.Status.ContainerStatuses
		return len(cs) == 1 && cs[0].State.Waiting != nil && cs[0].State.Waiting.Reason == "ImageNotMapped"
	})
	if p.Status.Phase != corev1.PodPending || podReady(p) || p.Spec.NodeName != "process-node" {
		t.Errorf("pod with an unmapped image: phase %s, ready %v, node %q; want Pending, not ready, on process-node",
			p.Status.Phase, podReady(p), p.Spec.NodeName)
	}
	if !strings.Contains(p.Status.ContainerStatuses[0].State.Waiting.Message, unmappedImage) {
		t.Errorf("waiting message %q does not name the image", p.Status.ContainerStatuses[0].State.Waiting.Message)
	}
	if left := podNetns(t); len(left) != 0 {
		t.Errorf("a pod that cannot run got a namespace: %v", left)
	}
}

func mustCreate(t *testing.T, create func() error) {
	t.Helper()
	// The namespace's default ServiceAccount, which Pods need, comes from
	// the controller manager a moment after the namespace.
	if err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		err := create()
		if err != nil && !apierrors.IsAlreadyExists(err) {
			t.Logf("create: %v", err)
			return false, nil
		}
		return true, nil
	}); err != nil {
		t.Fatal(err)
	}
}

func readyEndpoints(t *testing.T, client kubernetes.Interface, service string, n int) []string {
	t.Helper()
	var addrs []string
	err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		slices, err := client.DiscoveryV1().EndpointSlices(testNS).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + service})
		if err != nil {
			return false, nil
		}
		addrs = nil
		for _, s := range slices.Items {
			for _, e := range s.Endpoints {
				if e.Conditions.Ready != nil && *e.Conditions.Ready {
					addrs = append(addrs, e.Addresses...)
				}
			}
		}
		return len(addrs) == n, nil
	})
	if err != nil {
		t.Fatalf("service %s: ready endpoints %v, want %d: %v", service, addrs, n, err)
	}
	return addrs
}

func waitPod(t *testing.T, client kubernetes.Interface, name, what string, ok func(*corev1.Pod) bool) *corev1.Pod {
	t.Helper()
	var last *corev1.Pod
	err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		p, err := client.CoreV1().Pods(testNS).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		last = p
		return ok(p), nil
	})
	if err != nil {
		t.Fatalf("pod %s not %s: %v; status %+v", name, what, err, last.Status)
	}
	return last
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func podNetns(t *testing.T) []string {
	t.Helper()
	names, err := netnsNames()
	if err != nil {
		t.Fatal(err)
	}
	var ours []string
	for _, n := range names {
		if strings.HasPrefix(n, testNetns) {
			ours = append(ours, n)
		}
	}
	return ours
}

func get(t *testing.T, url string) string {
	t.Helper()
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return string(b)
}

// TestProjectedTokenRenewed: a pod's projected ServiceAccount token is
// requested again while the pod runs (here every second instead of at 80%
// of its lifetime) and replaces the file its process reads; each token is
// one the API server accepts for the pod's audience and is bound to the
// pod.
func TestProjectedTokenRenewed(t *testing.T) {
	client, _ := startKubelet(t, func(c *Config) { c.TokenRenewal = time.Second })
	ctx := t.Context()
	d := deployment("tok", testImage, 1)
	spec := &d.Spec.Template.Spec
	spec.Containers[0].Env[3].Value = "/var/run/tok/token"
	spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "tok", MountPath: "/var/run/tok", ReadOnly: true}}
	spec.Volumes = []corev1.Volume{{Name: "tok", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
		Sources: []corev1.VolumeProjection{{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{
			Audience: "kubelet-test", ExpirationSeconds: ptr.To(int64(600)), Path: "token",
		}}},
	}}}}
	mustCreate(t, func() error {
		_, err := client.AppsV1().Deployments(testNS).Create(ctx, d, metav1.CreateOptions{})
		return err
	})
	var pod corev1.Pod
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		l, err := client.CoreV1().Pods(testNS).List(ctx, metav1.ListOptions{LabelSelector: "app=tok"})
		if err != nil || len(l.Items) != 1 || !podReady(&l.Items[0]) {
			return false, nil
		}
		pod = l.Items[0]
		return true, nil
	}); err != nil {
		t.Fatalf("no ready pod: %v", err)
	}
	url := "http://" + net.JoinHostPort(pod.Status.PodIP, "8080") + "/"
	token := func() string {
		body := get(t, url)
		tok, ok := strings.CutPrefix(body, pod.Name+" "+testNS+" ")
		if !ok || tok == "" || strings.HasPrefix(tok, "no file") {
			t.Fatalf("pod answered %q, want its name, namespace and token", body)
		}
		return tok
	}
	first := token()
	var second string
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 20*time.Second, true, func(context.Context) (bool, error) {
		second = token()
		return second != first, nil
	}); err != nil {
		t.Fatalf("the token file still holds the first token after 20 s (renewal every second)")
	}
	for i, tok := range []string{first, second} {
		tr, err := client.AuthenticationV1().TokenReviews().Create(ctx, &authnv1.TokenReview{
			Spec: authnv1.TokenReviewSpec{Token: tok, Audiences: []string{"kubelet-test"}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		st := tr.Status
		if !st.Authenticated || st.User.Username != "system:serviceaccount:"+testNS+":default" {
			t.Errorf("token %d: authenticated %v as %q (%s), want %s's default ServiceAccount", i, st.Authenticated, st.User.Username, st.Error, testNS)
			continue
		}
		if got := st.User.Extra["authentication.kubernetes.io/pod-name"]; len(got) != 1 || got[0] != pod.Name {
			t.Errorf("token %d is bound to pod %v, want %s", i, got, pod.Name)
		}
	}
}
