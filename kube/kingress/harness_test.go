package kingress

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/h2c"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/reflection"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"

	"portico.dev/portico/internal/controlplane/acme"
	"portico.dev/portico/internal/controlplane/knative"
	"portico.dev/portico/internal/controlplane/pipeline"
	"portico.dev/portico/internal/testkit/acmetest"
	"portico.dev/portico/internal/testkit/freeport"
	"portico.dev/portico/internal/testkit/kubetest"
	"portico.dev/portico/kube"
	"portico.dev/portico/kube/leader"
	"portico.dev/portico/kube/secretstorage"
	"portico.dev/portico/proxy"
	"portico.dev/portico/translate"
)

// knFixture is a real API server with the Knative networking CRDs,
// backends in a network namespace, and Portico replicas in Knative mode,
// each on the host's end of a network namespace of its own, so that the
// cluster-local Service's EndpointSlice can list them.
type knFixture struct {
	*kubetest.ClusterFixture
	dyn      dynamic.Interface
	settings translate.KnativeSettings
	external types.NamespacedName
	replicas []*knReplica
	backends map[string]*knBackend
	// client is what replicas reach the API server with; the admin's
	// unless a test runs them as a ServiceAccount.
	client *rest.Config
	// pebble, when set, gives replicas an ACME manager that orders there;
	// tuneACME adjusts its options.
	pebble   *acmetest.Server
	tuneACME func(*acme.Options)
	// grace is the replicas' ProbeOptions.Grace: long by default, so that
	// a test sees one status write per generation however loaded the
	// machine is.
	grace time.Duration
}

type knReplica struct {
	ip     string
	loop   *pipeline.Loop
	rt     *proxy.Runtime
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
}

func newKnFixture(t *testing.T) *knFixture {
	t.Helper()
	f := &knFixture{ClusterFixture: kubetest.NewClusterFixture(t), backends: map[string]*knBackend{}, grace: 10 * time.Second}
	f.client = f.Env.Config
	ctx := context.Background()
	if err := kubetest.ApplyManifests(ctx, f.Env.Config, "testdata/knative"); err != nil {
		t.Fatal(err)
	}
	var err error
	if f.dyn, err = dynamic.NewForConfig(f.Env.Config); err != nil {
		t.Fatal(err)
	}
	f.Namespace("portico-system", nil)
	f.Namespace("serving", nil)
	f.external = types.NamespacedName{Namespace: "portico-system", Name: "portico-external"}
	f.settings = translate.KnativeSettings{
		ExternalHTTPPort: int32(freeport.Port(t)), ExternalHTTPSPort: int32(freeport.Port(t)),
		LocalHTTPPort: int32(freeport.Port(t)), LocalHTTPSPort: int32(freeport.Port(t)),
		LocalService: types.NamespacedName{Namespace: "portico-system", Name: "portico-internal"},
	}
	f.coreService("portico-system", "portico-external", "http", 80, nil)
	return f
}

// startReplicas starts n replicas and lists them as the ready endpoints
// of the cluster-local Service.
func (f *knFixture) startReplicas(n int) {
	f.T.Helper()
	var ips []string
	for i := range n {
		ns := kubetest.NewNetns(f.T, fmt.Sprintf("knr%d", i))
		ips = append(ips, ns.HostAddr.String())
	}
	f.coreService("portico-system", "portico-internal", "http", f.settings.LocalHTTPPort, ips)
	for i, ip := range ips {
		f.replicas = append(f.replicas, f.startReplica(ip, fmt.Sprintf("portico-%d", i)))
	}
}

func (f *knFixture) startReplica(ip, identity string) *knReplica {
	f.T.Helper()
	kc, gc := kubetest.Clients(f.T, f.client)
	dyn, err := dynamic.NewForConfig(f.client)
	if err != nil {
		f.T.Fatal(err)
	}
	log := zaptest.NewLogger(f.T).Named(identity)
	opts := proxy.DefaultOptions()
	opts.BindAddress = ip
	opts.DrainTimeout = 2 * time.Second
	r := &knReplica{ip: ip, rt: proxy.New(opts, log.Named("proxy")), done: make(chan error, 1)}
	c := &kube.Cluster{Kube: kc, Gateway: gc, Log: log,
		LeaderElection: leader.Election{Namespace: "portico-system", Name: "portico", Identity: identity,
			LeaseDuration: 3 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 250 * time.Millisecond, ReleaseOnCancel: true}}
	kn := &Knative{Cluster: Cluster{Run: c.Run, Snapshot: c.Snapshot, Leading: c.Leading}, Log: c.Log, Dynamic: dyn, Settings: f.settings, ExternalService: f.external,
		Probe: ProbeOptions{Interval: 20 * time.Millisecond, Grace: f.grace}}
	settings := f.settings
	// An interface, not *acme.Manager: a nil pointer in it would not be a
	// nil ACME to the loop.
	var certs pipeline.ACME
	if f.pebble != nil {
		storage, err := secretstorage.New(kc, secretstorage.Options{Namespace: "portico-system", Identity: identity})
		if err != nil {
			f.T.Fatal(err)
		}
		mopts := acme.Options{Directory: f.pebble.DirectoryURL, TrustedRoots: f.pebble.DirectoryRoots, Storage: storage,
			MinBackoff: time.Second, OnChange: func() { r.loop.Changed() }, Logger: log.Named("acme")}
		if f.tuneACME != nil {
			f.tuneACME(&mopts)
		}
		mgr, err := acme.New(mopts)
		if err != nil {
			f.T.Fatal(err)
		}
		certs = mgr
		f.T.Cleanup(mgr.Close)
		c.ACME = mgr
		opts.Challenges = mgr
		r.rt = proxy.New(opts, log.Named("proxy"))
	}
	r.loop = pipeline.New(pipeline.Options{Holdoff: 20 * time.Millisecond, MaxDelay: 200 * time.Millisecond, RetryAfter: 500 * time.Millisecond,
		Translate: translate.Settings{Shared: &translate.SharedAddresses{}, Knative: &settings}},
		kn, r.rt, certs, pipeline.Outputs{Statuses: c.WriteStatuses, ACME: c.WriteACME, Knative: kn.WriteKnative}, log)
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go func() { r.done <- r.loop.Run(ctx) }()
	f.T.Cleanup(r.stop)
	kubetest.WaitFor(f.T, 30*time.Second, identity+" ready", func() error { return r.loop.Ready() })
	return r
}

func (r *knReplica) stop() {
	r.once.Do(func() {
		r.cancel()
		<-r.done
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = r.rt.Close(ctx)
	})
}

func (r *knReplica) addr(port int32) string { return net.JoinHostPort(r.ip, strconv.Itoa(int(port))) }

// coreService creates a Service with one port and, when ips are given,
// its EndpointSlice (every address ready, on targetPort).
func (f *knFixture) coreService(namespace, name, portName string, targetPort int32, ips []string) {
	f.T.Helper()
	ctx := context.Background()
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: portName, Port: 80, TargetPort: intstr.FromInt32(targetPort)}}}}
	if _, err := f.Kube.CoreV1().Services(namespace).Create(ctx, svc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		f.T.Fatalf("create Service %s/%s: %v", namespace, name, err)
	}
	if len(ips) == 0 {
		return
	}
	es := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: namespace, Name: name + "-1", Labels: map[string]string{discoveryv1.LabelServiceName: name}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To(portName), Port: ptr.To(targetPort)}},
	}
	for _, ip := range ips {
		es.Endpoints = append(es.Endpoints, discoveryv1.Endpoint{Addresses: []string{ip}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}})
	}
	if _, err := f.Kube.DiscoveryV1().EndpointSlices(namespace).Create(ctx, es, metav1.CreateOptions{}); err != nil {
		f.T.Fatalf("create EndpointSlice %s/%s: %v", namespace, es.Name, err)
	}
}

// backend starts a backend in the network namespace behind Service
// serving/name, whose port is named portName ("http2" makes it h2c).
func (f *knFixture) backend(name, portName string) *knBackend {
	f.T.Helper()
	ln, err := f.Netns.Listen("tcp", f.Netns.AddrPort(0))
	if err != nil {
		f.T.Fatal(err)
	}
	b := &knBackend{name: name}
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: h2c.NewHandler(b, &http2.Server{})}
	b.srv = srv
	go srv.Serve(ln) //nolint:errcheck // ends with Close
	f.T.Cleanup(func() { srv.Close() })
	port := int32(ln.Addr().(*net.TCPAddr).Port)
	f.coreService("serving", name, portName, port, []string{f.Netns.Addr.String()})
	f.backends[name] = b
	return b
}

// knBackend plays a revision: it echoes the request as JSON, or on
// /ws upgrades to an echoing WebSocket-like stream, on /stream echoes an
// HTTP/2 request body as it arrives, on /503 answers 503, and on /delay
// waits ?d= first.
type knBackend struct {
	name string
	srv  *http.Server
	hits atomic.Int64
}

type knEcho struct {
	Backend string              `json:"backend"`
	Host    string              `json:"host"`
	Path    string              `json:"path"`
	Proto   string              `json:"proto"`
	Headers map[string][]string `json:"headers"`
}

func (b *knBackend) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b.hits.Add(1)
	w.Header().Set("X-Backend", b.name)
	switch r.URL.Path {
	case "/ws":
		b.upgrade(w, r)
		return
	case "/stream":
		w.WriteHeader(http.StatusOK)
		rc := http.NewResponseController(w)
		_ = rc.Flush()
		buf := make([]byte, 64)
		for {
			n, err := r.Body.Read(buf)
			if n > 0 {
				_, _ = w.Write(buf[:n])
				_ = rc.Flush()
			}
			if err != nil {
				return
			}
		}
	case "/503":
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	case "/delay":
		d, _ := time.ParseDuration(r.URL.Query().Get("d"))
		time.Sleep(d)
	}
	_ = json.NewEncoder(w).Encode(knEcho{Backend: b.name, Host: r.Host, Path: r.URL.RequestURI(), Proto: r.Proto, Headers: r.Header})
}

// upgrade switches to an echo of every byte, as a WebSocket backend
// would after its handshake.
func (b *knBackend) upgrade(w http.ResponseWriter, r *http.Request) {
	if !strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
		http.Error(w, "not an upgrade", http.StatusBadRequest)
		return
	}
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return
	}
	defer conn.Close()
	fmt.Fprintf(brw, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nX-Backend: %s\r\n\r\n", b.name)
	_ = brw.Flush()
	_, _ = io.Copy(conn, brw)
}

// apply creates or updates a KIngress from YAML.
func (f *knFixture) apply(doc string) *unstructured.Unstructured {
	f.T.Helper()
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
		f.T.Fatal(err)
	}
	ri := f.dyn.Resource(knative.IngressResource).Namespace(u.GetNamespace())
	ctx := context.Background()
	cur, err := ri.Get(ctx, u.GetName(), metav1.GetOptions{})
	if err == nil {
		u.SetResourceVersion(cur.GetResourceVersion())
		out, err := ri.Update(ctx, u, metav1.UpdateOptions{})
		if err != nil {
			f.T.Fatalf("update KIngress %s: %v", u.GetName(), err)
		}
		return out
	}
	out, err := ri.Create(ctx, u, metav1.CreateOptions{})
	if err != nil {
		f.T.Fatalf("create KIngress %s: %v", u.GetName(), err)
	}
	return out
}

func (f *knFixture) get(namespace, name string) (*unstructured.Unstructured, *knative.Ingress) {
	f.T.Helper()
	u, err := f.dyn.Resource(knative.IngressResource).Namespace(namespace).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		f.T.Fatalf("get KIngress %s/%s: %v", namespace, name, err)
	}
	ing := &knative.Ingress{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, ing); err != nil {
		f.T.Fatal(err)
	}
	return u, ing
}

func condition(ing *knative.Ingress, typ string) knative.Condition {
	for _, c := range ing.Status.Conditions {
		if c.Type == typ {
			return c
		}
	}
	return knative.Condition{}
}

// waitReady waits until the KIngress's status says Ready=True for its
// current generation, and returns it.
func (f *knFixture) waitReady(namespace, name string) *knative.Ingress {
	f.T.Helper()
	var ing *knative.Ingress
	kubetest.WaitFor(f.T, 30*time.Second, "KIngress "+name+" Ready", func() error {
		_, ing = f.get(namespace, name)
		c := condition(ing, knative.ConditionReady)
		if c.Status != metav1.ConditionTrue || ing.Status.ObservedGeneration != ing.Generation {
			return fmt.Errorf("generation %d, observed %d, Ready %s %s: %s", ing.Generation, ing.Status.ObservedGeneration, c.Status, c.Reason, c.Message)
		}
		return nil
	})
	return ing
}

// do sends a request to a replica's port, with Host host.
func do(t testing.TB, c *http.Client, method, addr, host, path string, header http.Header) (*http.Response, []byte) {
	t.Helper()
	scheme := "http://"
	if tr, ok := c.Transport.(*http.Transport); ok && tr.TLSClientConfig != nil {
		scheme = "https://"
	}
	req, err := http.NewRequest(method, scheme+addr+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = host
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s%s via %s: %v", method, host, path, addr, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s%s via %s: reading: %v", method, host, path, addr, err)
	}
	return resp, body
}

func echoOf(t testing.TB, resp *http.Response, body []byte) knEcho {
	t.Helper()
	var e knEcho
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d, want 200: %s", resp.StatusCode, body)
	}
	if err := json.Unmarshal(body, &e); err != nil {
		t.Fatalf("not an echo: %s", body)
	}
	return e
}

// websocket opens an upgraded connection through addr and checks that
// bytes come back.
func knWebSocket(t testing.TB, addr, host string) string {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(conn, "GET /ws HTTP/1.1\r\nHost: %s\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n", host)
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade: status %d", resp.StatusCode)
	}
	for _, msg := range []string{"ping", "pong"} {
		if _, err := conn.Write([]byte(msg)); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, len(msg))
		if _, err := io.ReadFull(br, got); err != nil || string(got) != msg {
			t.Fatalf("echo of %q: %q, %v", msg, got, err)
		}
	}
	return resp.Header.Get("X-Backend")
}

// bidiStream sends an HTTP/2 cleartext request whose body and answer
// interleave, as a bidirectional gRPC stream does: each message is written
// only after the previous one came back. It returns the backend's name.
func bidiStream(t testing.TB, addr, host string) string {
	t.Helper()
	tr := &http2.Transport{AllowHTTP: true, DialTLSContext: func(ctx context.Context, network, a string, _ *tls.Config) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, a)
	}}
	defer tr.CloseIdleConnections()
	pr, pw := io.Pipe()
	defer pw.Close()
	req, err := http.NewRequest(http.MethodPost, "http://"+addr+"/stream", pr)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = host
	req.Header.Set("Content-Type", "application/grpc")
	msgs := []string{"first", "second", "third"}
	go pw.Write([]byte(msgs[0])) //nolint:errcheck // read back below
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := tr.RoundTrip(req.WithContext(ctx))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	for i, msg := range msgs {
		if i > 0 {
			if _, err := pw.Write([]byte(msg)); err != nil {
				t.Fatal(err)
			}
		}
		got := make([]byte, len(msg))
		if _, err := io.ReadFull(resp.Body, got); err != nil || string(got) != msg {
			t.Fatalf("stream message %d: %q, %v", i, got, err)
		}
	}
	return resp.Header.Get("X-Backend")
}

func toKIngress(t testing.TB, obj runtime.Object) *knative.Ingress {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		t.Errorf("watch gave a %T", obj)
		return &knative.Ingress{}
	}
	ing := &knative.Ingress{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, ing); err != nil {
		t.Error(err)
	}
	return ing
}

// echoGet is a GET through addr that a backend must answer with its echo.
func echoGet(t testing.TB, c *http.Client, addr, host, path string, header http.Header) knEcho {
	t.Helper()
	resp, body := do(t, c, http.MethodGet, addr, host, path, header)
	return echoOf(t, resp, body)
}

// grpcBackend starts a gRPC server (reflection, whose one method is a
// bidirectional stream) in the network namespace behind Service
// serving/name, port named portName; every stream's header names it.
func (f *knFixture) grpcBackend(name, portName string) {
	f.T.Helper()
	ln, err := f.Netns.Listen("tcp", f.Netns.AddrPort(0))
	if err != nil {
		f.T.Fatal(err)
	}
	srv := grpc.NewServer(grpc.StreamInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if err := ss.SetHeader(metadata.Pairs("x-backend", name)); err != nil {
			return err
		}
		return handler(srv, ss)
	}))
	reflection.Register(srv)
	go srv.Serve(ln) //nolint:errcheck // ends with Stop
	f.T.Cleanup(srv.Stop)
	f.coreService("serving", name, portName, int32(ln.Addr().(*net.TCPAddr).Port), []string{f.Netns.Addr.String()})
}

// grpcBidi runs one bidirectional gRPC stream through addr with authority
// host: three requests, each sent after the previous answer came back. It
// returns the backend's name.
func grpcBidi(t testing.TB, addr, host string) string {
	t.Helper()
	conn, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithAuthority(host))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if err := stream.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
		resp, err := stream.Recv()
		if err != nil {
			t.Fatalf("receive %d: %v", i, err)
		}
		if resp.GetListServicesResponse() == nil {
			t.Fatalf("answer %d: %v", i, resp)
		}
	}
	if err := stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != io.EOF {
		t.Fatalf("end of stream: %v", err)
	}
	md, err := stream.Header()
	if err != nil {
		t.Fatal(err)
	}
	if v := md.Get("x-backend"); len(v) == 1 {
		return v[0]
	}
	return ""
}
