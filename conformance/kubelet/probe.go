package kubelet

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// probeClient runs readiness probes: no keep-alive, so that every probe
// is a connection as a kubelet's is.
var probeClient = &http.Client{
	Timeout:   time.Second,
	Transport: &http.Transport{DisableKeepAlives: true},
	// A kubelet follows no redirect to another host; a 3xx is success.
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
}

// probeUserAgent is the User-Agent of a kubelet's HTTP probes,
// kube-probe/<major>.<minor> of its Kubernetes version: that of the
// k8s.io/api module in go.mod (v0.37.x is Kubernetes 1.37), which
// TestProbeUserAgentMatchesModule holds it to. A backend may answer
// probes by it, as Knative's queue-proxy does.
const probeUserAgent = "kube-probe/1.37"

// containerReady is whether a container is ready: its readinessProbe's
// httpGet answers 200-399 when it has one, else it has a socket listening.
func containerReady(spec corev1.Container, pid int, netns, podIP string) bool {
	p := spec.ReadinessProbe
	if p == nil || p.HTTPGet == nil {
		return listening(pid, netns)
	}
	if pid <= 0 {
		return false
	}
	port, err := probePort(spec, p.HTTPGet.Port)
	if err != nil {
		return false
	}
	host := podIP
	if p.HTTPGet.Host != "" {
		host = p.HTTPGet.Host
	}
	scheme := "http"
	if p.HTTPGet.Scheme == corev1.URISchemeHTTPS {
		scheme = "https" // certificates are not checked, as a kubelet does not
	}
	url := fmt.Sprintf("%s://%s%s", scheme, net.JoinHostPort(host, strconv.Itoa(port)), p.HTTPGet.Path)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return false
	}
	for _, h := range p.HTTPGet.HTTPHeaders {
		req.Header.Add(h.Name, h.Value)
	}
	// A probe's own User-Agent wins, as a kubelet's does.
	if _, ok := req.Header["User-Agent"]; !ok {
		req.Header.Set("User-Agent", probeUserAgent)
	}
	resp, err := probeClient.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode >= 200 && resp.StatusCode < 400
}

// probePort resolves a probe's port: a number, or the name of a container
// port.
func probePort(c corev1.Container, port intstr.IntOrString) (int, error) {
	if port.Type == intstr.Int {
		return port.IntValue(), nil
	}
	for _, p := range c.Ports {
		if p.Name == port.StrVal {
			return int(p.ContainerPort), nil
		}
	}
	return 0, fmt.Errorf("container %q has no port named %q", c.Name, port.StrVal)
}

// serviceAccountToken asks the API server for a token of the pod's
// ServiceAccount, bound to the pod, as a kubelet does for a projected
// serviceAccountToken volume.
func (k *Kubelet) serviceAccountToken(pod *corev1.Pod, src *corev1.ServiceAccountTokenProjection) (string, error) {
	spec := authnv1.TokenRequestSpec{
		ExpirationSeconds: src.ExpirationSeconds,
		BoundObjectRef:    &authnv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
	}
	if src.Audience != "" {
		spec.Audiences = []string{src.Audience}
	}
	sa := pod.Spec.ServiceAccountName
	if sa == "" {
		sa = "default"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tr, err := k.cfg.Client.CoreV1().ServiceAccounts(pod.Namespace).CreateToken(ctx, sa, &authnv1.TokenRequest{Spec: spec}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("token of ServiceAccount %s/%s: %w", pod.Namespace, sa, err)
	}
	return tr.Status.Token, nil
}
