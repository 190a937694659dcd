// Package harness brings up what the Gateway API conformance suite runs
// against, with no container engine: a real control plane (kube-apiserver,
// etcd and kube-controller-manager from kube/kubetest), the process kubelet
// running the suite's backends in network namespaces on a bridge, and
// Portico in cluster mode in the host's namespace, serving a GatewayClass.
package harness

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"portico.dev/portico/internal/testkit/proc"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
	gatewayclient "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"

	"portico.dev/portico/conformance/kubelet"
	"portico.dev/portico/internal/testkit/kubetest"
)

// The addresses of a run. Pods get addresses from a range reserved for
// benchmarking networks (RFC 2544) that exists only on this machine's bridge;
// Service cluster IPs, which nothing routes, take another part of it.
var (
	podRange     = netip.MustParsePrefix("198.19.252.0/22")
	serviceRange = "198.19.0.0/17"
)

const (
	// Bridge is the name of the pod bridge. A run removes a leftover of a
	// crashed run of the same name before it starts, and so may a clean-up
	// script.
	Bridge = "portico-conf0"
	// NetnsPrefix starts the name of every pod's network namespace.
	NetnsPrefix = "portico-conf-"
	// NodeName is the Node the process kubelet registers.
	NodeName = "portico-conformance-node"
	// EchoBasicImage is the repository of the suite's backend image.
	EchoBasicImage = "registry.k8s.io/gateway-api/conformance/echo-basic"
	// portico's own namespace, for its leader-election Lease.
	porticoNamespace = "portico-system"
)

// Options says what to run.
type Options struct {
	// Portico is the portico binary.
	Portico string
	// EchoBasic is the binary that stands in for EchoBasicImage.
	EchoBasic string
	// Dir receives the logs, the kubeconfig and each pod's files. It is
	// left in place for a person to look into.
	Dir string
	// GatewayClass is created with ControllerName, which Portico serves.
	GatewayClass   string
	ControllerName string
	// Logf receives progress lines; nil discards them.
	Logf func(format string, args ...any)
	// Channel is the Gateway API release channel whose CRDs the API server
	// gets: "standard" (also when empty) or "experimental".
	Channel string
	// PerGateway gives the GatewayClass PorticoParameters of mode
	// PerGateway (the CRD of ParametersCRD is installed): every Gateway
	// gets a Deployment and a LoadBalancer Service of its own, whose pods
	// the process kubelet runs from the Portico binary (image
	// PorticoImage), and a stand-in load balancer serves on pool
	// addresses.
	PerGateway    bool
	ParametersCRD string
}

// PorticoImage is the image of provisioned data planes in a per-Gateway
// run; its repository (images are mapped without their tag) is mapped to
// the Portico binary under test.
const (
	porticoRepository = "portico.dev/portico"
	PorticoImage      = porticoRepository + ":conformance"
)

// Cluster is a running control plane with a node and Portico.
type Cluster struct {
	// Config reaches the API server as an administrator.
	Config *rest.Config
	// GatewayAddress is where Portico's listeners are, and what it
	// reports in every Gateway's status.
	GatewayAddress netip.Addr
	// gatewayPool are the host addresses Portico hands to Gateways.
	gatewayPool []netip.Addr
	// Images maps the images the kubelet can run to their binaries.
	Images kubelet.Images

	opts    Options
	env     *kubetest.Env
	network *kubelet.Network
	kubelet *kubelet.Kubelet
	stopKL  context.CancelFunc
	klDone  sync.WaitGroup
	portico *proc.Proc
	stopLB  context.CancelFunc
	lbDone  sync.WaitGroup
}

// StaticAddress is a pool address for a Gateway that asks for one in
// spec.addresses: the last one of the pool, which Portico hands out last
// to Gateways that ask for none, so that no other Gateway of the suite
// has it.
func (c *Cluster) StaticAddress() netip.Addr {
	return c.gatewayPool[len(c.gatewayPool)-1]
}

// UnusableAddress is an address Portico cannot serve a Gateway on: one
// of the documentation range, which is neither in the pool nor on the host.
func (c *Cluster) UnusableAddress() netip.Addr {
	return netip.MustParseAddr("192.0.2.1")
}

// Start brings everything up; on error whatever had started is stopped.
func Start(ctx context.Context, opts Options) (_ *Cluster, err error) {
	if opts.Logf == nil {
		opts.Logf = func(string, ...any) {}
	}
	for _, bin := range []string{opts.Portico, opts.EchoBasic} {
		if _, err := os.Stat(bin); err != nil {
			return nil, fmt.Errorf("harness: binary: %w", err)
		}
	}
	if err := os.MkdirAll(opts.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("harness: %w", err)
	}
	c := &Cluster{
		opts:   opts,
		Images: kubelet.Images{EchoBasicImage: opts.EchoBasic},
	}
	if opts.PerGateway {
		c.Images[porticoRepository] = opts.Portico
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, c.Stop())
		}
	}()

	start := time.Now()
	c.env, err = kubetest.StartEnv(ctx, kubetest.Options{
		APIServerArgs: []string{"--service-cluster-ip-range=" + serviceRange},
		Channel:       opts.Channel,
	})
	if err != nil {
		return c, fmt.Errorf("harness: control plane: %w", err)
	}
	if err := c.env.StartControllerManager(ctx); err != nil {
		return c, fmt.Errorf("harness: controller manager: %w", err)
	}
	c.Config = c.env.Config
	opts.Logf("harness: control plane ready in %v", time.Since(start).Round(time.Millisecond))

	client, err := kubernetes.NewForConfig(c.Config)
	if err != nil {
		return c, fmt.Errorf("harness: client: %w", err)
	}
	c.network = &kubelet.Network{Bridge: Bridge, Prefix: podRange, NetnsPrefix: NetnsPrefix}
	if err := c.network.SetUp(ctx); err != nil {
		return c, fmt.Errorf("harness: %w", err)
	}
	c.GatewayAddress = c.network.HostAddr()
	// The suite's Gateways share listener ports (several listen on 80
	// without a hostname); each gets an address of its own from this pool.
	if c.gatewayPool, err = c.network.AddHostAddrs(ctx, gatewayPoolSize); err != nil {
		return c, fmt.Errorf("harness: %w", err)
	}
	if err := c.startKubelet(ctx, client); err != nil {
		return c, err
	}
	if opts.PerGateway {
		if err := c.startPerGateway(ctx, client); err != nil {
			return c, err
		}
	}
	if err := c.startPortico(ctx, client); err != nil {
		return c, err
	}
	if err := c.createGatewayClass(ctx); err != nil {
		return c, err
	}
	opts.Logf("harness: cluster with Portico ready in %v (gateway address %v, logs in %s)",
		time.Since(start).Round(time.Millisecond), c.GatewayAddress, opts.Dir)
	return c, nil
}

// startKubelet runs the process kubelet until Stop and waits for its Node.
func (c *Cluster) startKubelet(ctx context.Context, client kubernetes.Interface) error {
	opts := c.opts
	var err error
	c.kubelet, err = kubelet.New(kubelet.Config{
		Client:   client,
		NodeName: NodeName,
		Network:  c.network,
		Images:   c.Images,
		Dir:      filepath.Join(opts.Dir, "pods"),
		Logf:     opts.Logf,
	})
	if err != nil {
		return err
	}
	klCtx, stop := context.WithCancel(context.Background())
	c.stopKL = stop
	c.klDone.Go(func() {
		if err := c.kubelet.Run(klCtx); err != nil {
			opts.Logf("harness: kubelet: %v", err)
		}
	})
	if err := kubelet.WaitForNode(ctx, client, NodeName); err != nil {
		return fmt.Errorf("harness: node never became Ready: %w", err)
	}

	return nil
}

// startPortico runs Portico in cluster mode as the administrator, with its
// listeners on the host's bridge address, and waits until it is ready.
func (c *Cluster) startPortico(ctx context.Context, client kubernetes.Interface) error {
	if err := c.ensureNamespace(ctx, client); err != nil {
		return err
	}
	kubeconfig := filepath.Join(c.opts.Dir, "kubeconfig")
	if err := writeKubeconfig(kubeconfig, c.Config); err != nil {
		return err
	}
	adminAddr, err := freeLoopbackAddr()
	if err != nil {
		return err
	}
	addr := c.GatewayAddress.String()
	args := []string{
		"serve",
		"--kubeconfig=" + kubeconfig,
		"--controller-name=" + c.opts.ControllerName,
		// Only bridge addresses: the listener ports (80, 443, 8080, ...)
		// stay free on every other address of the machine.
		"--bind-address=" + addr,
		"--admin-address=" + adminAddr,
		"--namespace=" + porticoNamespace,
		"--identity=conformance",
		"--drain-timeout=1s",
		"--log-level=debug",
	}
	if c.opts.PerGateway {
		// The data planes, in their pods, reach the controller on the
		// host's bridge address.
		controller := net.JoinHostPort(addr, "9443")
		args = append(args, "--data-plane-image="+PorticoImage, "--data-plane-image-pull-policy=Never",
			"--data-plane-listen="+controller, "--data-plane-controller-address="+controller)
	} else {
		args = append(args, "--gateway-address-pool="+joinAddrs(c.gatewayPool))
	}
	c.portico, err = proc.Start("portico", filepath.Join(c.opts.Dir, "portico.log"), c.opts.Portico, nil, args...)
	if err != nil {
		return fmt.Errorf("harness: %w", err)
	}
	hc := &http.Client{Timeout: 2 * time.Second}
	var last string
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		if done, werr := c.portico.Exited(); done {
			return false, fmt.Errorf("portico exited: %v", werr)
		}
		resp, err := hc.Get("http://" + adminAddr + "/readyz")
		if err != nil {
			last = err.Error()
			return false, nil
		}
		resp.Body.Close()
		last = resp.Status
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		return fmt.Errorf("harness: portico not ready (last: %s): %w\n%s", last, err, c.portico.LogTail(8<<10))
	}
	return nil
}

// ensureNamespace creates Portico's namespace.
func (c *Cluster) ensureNamespace(ctx context.Context, client kubernetes.Interface) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: porticoNamespace}}
	if _, err := client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("harness: namespace %s: %w", porticoNamespace, err)
	}
	return nil
}

func (c *Cluster) createGatewayClass(ctx context.Context) error {
	gc, err := gatewayclient.NewForConfig(c.Config)
	if err != nil {
		return fmt.Errorf("harness: gateway client: %w", err)
	}
	class := &gwv1.GatewayClass{
		ObjectMeta: metav1.ObjectMeta{Name: c.opts.GatewayClass},
		Spec:       gwv1.GatewayClassSpec{ControllerName: gwv1.GatewayController(c.opts.ControllerName)},
	}
	if c.opts.PerGateway {
		class.Spec.ParametersRef = &gwv1.ParametersReference{Group: "portico.dev", Kind: "PorticoParameters",
			Name: perGatewayParameters, Namespace: ptr.To(gwv1.Namespace(porticoNamespace))}
	}
	if _, err := gc.GatewayV1().GatewayClasses().Create(ctx, class, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("harness: GatewayClass: %w", err)
	}
	return nil
}

// Stop stops Portico, the kubelet with every pod, the network and the
// control plane, in that order. The control plane's logs are copied into
// Dir first, since its own directory goes with it.
func (c *Cluster) Stop() error {
	var errs []error
	if c.portico != nil {
		errs = append(errs, c.portico.Stop(10*time.Second))
	}
	if c.stopLB != nil {
		c.stopLB()
		c.lbDone.Wait()
	}
	if c.stopKL != nil {
		if c.kubelet != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_ = c.kubelet.DeleteNode(ctx)
			cancel()
		}
		c.stopKL()
		c.klDone.Wait()
	}
	if c.network != nil {
		errs = append(errs, c.network.TearDown(context.Background()))
	}
	if c.env != nil {
		if err := os.WriteFile(filepath.Join(c.opts.Dir, "control-plane.log"), []byte(c.env.Logs(4<<20)), 0o644); err != nil {
			errs = append(errs, err)
		}
		errs = append(errs, c.env.Stop())
	}
	return errors.Join(errs...)
}

// writeKubeconfig writes a kubeconfig with the admin's token.
func writeKubeconfig(path string, cfg *rest.Config) error {
	caPath := path + ".ca.crt"
	if err := os.WriteFile(caPath, cfg.CAData, 0o600); err != nil {
		return fmt.Errorf("harness: kubeconfig: %w", err)
	}
	kc := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: conformance
  cluster:
    server: %s
    certificate-authority: %s
users:
- name: admin
  user:
    token: %s
contexts:
- name: conformance
  context:
    cluster: conformance
    user: admin
current-context: conformance
`, cfg.Host, caPath, cfg.BearerToken)
	if err := os.WriteFile(path, []byte(kc), 0o600); err != nil {
		return fmt.Errorf("harness: kubeconfig: %w", err)
	}
	return nil
}

// freeLoopbackAddr returns a loopback address with a port that was free a
// moment ago.
func freeLoopbackAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("harness: free port: %w", err)
	}
	defer l.Close()
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(l.Addr().(*net.TCPAddr).Port)), nil
}

// gatewayPoolSize bounds how many Gateways exist at once during the suite.
const gatewayPoolSize = 120

func joinAddrs(addrs []netip.Addr) string {
	s := make([]string, len(addrs))
	for i, a := range addrs {
		s[i] = a.String()
	}
	return strings.Join(s, ",")
}
