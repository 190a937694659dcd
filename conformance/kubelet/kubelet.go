// Package kubelet is a kubelet made of processes, for running the backends of
// Gateway API tests on a real control plane without a container engine. It
// registers a Node, schedules every pending Pod onto it, gives each Pod a
// network namespace on a bridge (see Network), runs each container's image as
// a local binary inside that namespace, and reports the Pod Running and Ready
// once the process listens (or its readinessProbe's httpGet answers).
// Deleted Pods lose their processes and namespace.
//
// A Pod that asks for something it cannot do (an image without a local
// binary, an init container, a host-path volume, ...) stays Pending, with the
// reason in its container status.
package kubelet

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"
	"k8s.io/client-go/util/workqueue"
)

// Config is what a Kubelet needs.
type Config struct {
	Client kubernetes.Interface
	// NodeName is the Node this kubelet registers and runs Pods on.
	NodeName string
	// Network is set up already; the kubelet adds and removes pods on it.
	Network *Network
	// Images maps images to local binaries.
	Images Images
	// Dir holds one directory per Pod: its volumes and container logs.
	Dir string
	// Logf receives one line per event worth knowing; nil discards them.
	Logf func(format string, args ...any)
	// StopGrace bounds how long a container may take to exit after SIGTERM.
	// Zero means two seconds: test backends hold no state worth waiting for.
	StopGrace time.Duration
	// TokenRenewal is how often projected ServiceAccount tokens are
	// requested again and rewritten; zero means at 80% of their lifetime.
	TokenRenewal time.Duration
}

// LogPort is where the kubelet serves container logs to the API server, on
// the host's bridge address: the kubelet's usual port.
const LogPort = 10250

// Kubelet runs Pods as processes. Create it with New, then Run it.
type Kubelet struct {
	cfg     Config
	pods    corelisters.PodLister
	secrets func(namespace, name string) (*corev1.Secret, error)
	configs func(namespace, name string) (*corev1.ConfigMap, error)
	queue   workqueue.TypedRateLimitingInterface[string]

	mu      sync.Mutex
	running map[string]*podRuntime // by namespace/name
}

// podRuntime is what runs for one Pod.
type podRuntime struct {
	uid        types.UID
	net        *PodNetwork
	dir        string
	started    time.Time
	containers []*container
	// stopTokens ends the renewal of the pod's projected tokens.
	stopTokens chan struct{}
}

func (rt *podRuntime) logPath(container string) string {
	return filepath.Join(rt.dir, container+".log")
}

// New checks the configuration. Nothing runs until Run.
func New(cfg Config) (*Kubelet, error) {
	if cfg.Client == nil || cfg.NodeName == "" || cfg.Network == nil || cfg.Dir == "" {
		return nil, errors.New("kubelet: Client, NodeName, Network and Dir are required")
	}
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	if cfg.StopGrace == 0 {
		cfg.StopGrace = 2 * time.Second
	}
	k := &Kubelet{
		cfg: cfg,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[string](100*time.Millisecond, 5*time.Second),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "process-kubelet"}),
		running: map[string]*podRuntime{},
	}
	k.secrets = func(ns, name string) (*corev1.Secret, error) {
		return cfg.Client.CoreV1().Secrets(ns).Get(context.Background(), name, metav1.GetOptions{})
	}
	k.configs = func(ns, name string) (*corev1.ConfigMap, error) {
		return cfg.Client.CoreV1().ConfigMaps(ns).Get(context.Background(), name, metav1.GetOptions{})
	}
	return k, nil
}

// Run registers the Node and runs Pods until ctx ends, then stops every Pod
// it runs and removes their namespaces. It returns once all is gone.
func (k *Kubelet) Run(ctx context.Context) error {
	if err := k.registerNode(ctx); err != nil {
		return err
	}
	factory := informers.NewSharedInformerFactory(k.cfg.Client, 0)
	podInformer := factory.Core().V1().Pods()
	k.pods = podInformer.Lister()
	enqueue := func(obj any) {
		if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
			k.queue.Add(key)
		}
	}
	if _, err := podInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
		DeleteFunc: enqueue,
	}); err != nil {
		return fmt.Errorf("kubelet: pod handler: %w", err)
	}
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	if !cache.WaitForCacheSync(ctx.Done(), podInformer.Informer().HasSynced) {
		return fmt.Errorf("kubelet: pod cache did not sync: %w", ctx.Err())
	}

	var wg sync.WaitGroup
	logErr := make(chan error, 1)
	wg.Go(func() { logErr <- k.serveLogs(ctx, net.JoinHostPort(k.hostIP(), strconv.Itoa(LogPort))) })
	for range 4 {
		wg.Go(func() {
			for k.processNext(ctx) {
			}
		})
	}
	var err error
	select {
	case <-ctx.Done():
	case err = <-logErr:
	}
	k.queue.ShutDown()
	wg.Wait()
	k.stopAll()
	return err
}

func (k *Kubelet) processNext(ctx context.Context) bool {
	key, quit := k.queue.Get()
	if quit {
		return false
	}
	defer k.queue.Done(key)
	requeue, err := k.sync(ctx, key)
	switch {
	case err != nil && ctx.Err() == nil:
		k.cfg.Logf("process kubelet: pod %s: %v", key, err)
		k.queue.AddRateLimited(key)
	case requeue > 0:
		k.queue.Forget(key)
		k.queue.AddAfter(key, requeue)
	default:
		k.queue.Forget(key)
	}
	return true
}

// sync brings one Pod to what its object asks for. A positive duration asks
// to look again after it (while a Pod is not ready yet).
func (k *Kubelet) sync(ctx context.Context, key string) (time.Duration, error) {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return 0, err
	}
	pod, err := k.pods.Pods(ns).Get(name)
	if apierrors.IsNotFound(err) {
		return 0, k.stopPod(key, "")
	}
	if err != nil {
		return 0, err
	}

	if pod.Spec.NodeName == "" {
		if pod.DeletionTimestamp != nil {
			return 0, nil
		}
		return 0, k.bind(ctx, pod)
	}
	if pod.Spec.NodeName != k.cfg.NodeName {
		return 0, nil
	}
	if pod.DeletionTimestamp != nil {
		if err := k.stopPod(key, pod.UID); err != nil {
			return 0, err
		}
		// The kubelet has the last word on a Pod's deletion: the object
		// goes once it says the containers are gone.
		err := k.cfg.Client.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{
			GracePeriodSeconds: new(int64),
			Preconditions:      &metav1.Preconditions{UID: &pod.UID},
		})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return 0, fmt.Errorf("delete: %w", err)
		}
		return 0, nil
	}

	k.mu.Lock()
	rt := k.running[key]
	k.mu.Unlock()
	if rt != nil && rt.uid != pod.UID {
		// Same name, new Pod: the old one's processes go first.
		if err := k.stopPod(key, rt.uid); err != nil {
			return 0, err
		}
		rt = nil
	}
	if rt == nil {
		if bad := checkPod(pod, k.cfg.Images); bad != nil {
			return 0, k.writeStatus(ctx, pod, func(st *corev1.PodStatus) { pendingStatus(st, pod, k.hostIP(), bad) })
		}
		if rt, err = k.startPod(ctx, key, pod); err != nil {
			var bad *unsupported
			if errors.As(err, &bad) {
				// Missing Secrets and the like can appear later.
				return 2 * time.Second, k.writeStatus(ctx, pod, func(st *corev1.PodStatus) { pendingStatus(st, pod, k.hostIP(), bad) })
			}
			return 0, err
		}
	}

	ready := true
	for i, c := range rt.containers {
		st := c.state()
		if !containerReady(pod.Spec.Containers[i], st.pid, rt.net.Netns, rt.net.Addr.String()) {
			ready = false
		}
	}
	if err := k.writeStatus(ctx, pod, func(st *corev1.PodStatus) { runningStatus(st, pod, rt, k.hostIP(), ready) }); err != nil {
		return 0, err
	}
	if !ready {
		return 200 * time.Millisecond, nil
	}
	return 0, nil
}

func (k *Kubelet) hostIP() string { return k.cfg.Network.HostAddr().String() }

// bind schedules the Pod onto this Node, as the scheduler would.
func (k *Kubelet) bind(ctx context.Context, pod *corev1.Pod) error {
	err := k.cfg.Client.CoreV1().Pods(pod.Namespace).Bind(ctx, &corev1.Binding{
		ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID},
		Target:     corev1.ObjectReference{Kind: "Node", Name: k.cfg.NodeName},
	}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("bind: %w", err)
	}
	return nil
}

// startPod creates the Pod's namespace, writes its volumes and starts its
// containers. An *unsupported error means the Pod may start later.
func (k *Kubelet) startPod(ctx context.Context, key string, pod *corev1.Pod) (_ *podRuntime, err error) {
	dir := filepath.Join(k.cfg.Dir, pod.Namespace+"_"+pod.Name+"_"+string(pod.UID))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("pod dir: %w", err)
	}
	pn, err := k.cfg.Network.AddPod(ctx, string(pod.UID))
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = pn.Delete(context.WithoutCancel(ctx))
			_ = os.RemoveAll(dir)
		}
	}()
	l := lookups{podIP: pn.Addr.String(), hostIP: k.hostIP(), secret: k.secrets, config: k.configs, token: k.serviceAccountToken}
	volumes, err := writeVolumes(pod, filepath.Join(dir, "volumes"), l)
	if err != nil {
		return nil, &unsupported{"CreateContainerConfigError", err.Error()}
	}
	procs, err := planContainers(pod, k.cfg.Images, volumes, l)
	if err != nil {
		return nil, &unsupported{"CreateContainerConfigError", err.Error()}
	}
	rt := &podRuntime{uid: pod.UID, net: pn, dir: dir, started: time.Now(), stopTokens: make(chan struct{})}
	if tokens := podTokens(pod, volumes); len(tokens) > 0 {
		go k.renewTokens(pod, tokens, rt.stopTokens)
	}
	changed := func() { k.queue.Add(key) }
	for _, p := range procs {
		rt.containers = append(rt.containers, startContainer(p, pn.Netns, rt.logPath(p.container), changed))
	}
	k.mu.Lock()
	k.running[key] = rt
	k.mu.Unlock()
	k.cfg.Logf("process kubelet: started pod %s at %v", key, pn.Addr)
	return rt, nil
}

// stopPod stops what runs for key, if it belongs to uid (any uid if empty).
func (k *Kubelet) stopPod(key string, uid types.UID) error {
	k.mu.Lock()
	rt := k.running[key]
	if rt == nil || (uid != "" && rt.uid != uid) {
		k.mu.Unlock()
		return nil
	}
	delete(k.running, key)
	k.mu.Unlock()
	err := k.teardown(rt)
	k.cfg.Logf("process kubelet: stopped pod %s", key)
	return err
}

func (k *Kubelet) teardown(rt *podRuntime) error {
	close(rt.stopTokens)
	var wg sync.WaitGroup
	for _, c := range rt.containers {
		wg.Go(func() { c.stop(k.cfg.StopGrace) })
	}
	wg.Wait()
	err := rt.net.Delete(context.Background())
	// Logs stay for a person looking into a failure; they go with Dir.
	_ = os.RemoveAll(filepath.Join(rt.dir, "volumes"))
	return err
}

func (k *Kubelet) stopAll() {
	k.mu.Lock()
	all := k.running
	k.running = map[string]*podRuntime{}
	k.mu.Unlock()
	var wg sync.WaitGroup
	for key, rt := range all {
		wg.Go(func() {
			if err := k.teardown(rt); err != nil {
				k.cfg.Logf("process kubelet: pod %s: %v", key, err)
			}
		})
	}
	wg.Wait()
}

// writeStatus applies change to the Pod's latest status and writes it back
// when it differs.
func (k *Kubelet) writeStatus(ctx context.Context, pod *corev1.Pod, change func(*corev1.PodStatus)) error {
	want := pod.Status.DeepCopy()
	change(want)
	if apiequality.Semantic.DeepEqual(want, &pod.Status) {
		return nil
	}
	pods := k.cfg.Client.CoreV1().Pods(pod.Namespace)
	first := true
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur := pod
		if !first {
			var err error
			if cur, err = pods.Get(ctx, pod.Name, metav1.GetOptions{}); err != nil {
				return err
			}
			if cur.UID != pod.UID {
				return nil
			}
		}
		first = false
		next := cur.DeepCopy()
		change(&next.Status)
		_, err := pods.UpdateStatus(ctx, next, metav1.UpdateOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return err
	})
}

// registerNode creates the Node (or takes over one of the same name) and
// reports it Ready. Nothing watches the Node's heartbeat here (no node
// lifecycle controller runs), so it is written once.
func (k *Kubelet) registerNode(ctx context.Context) error {
	nodes := k.cfg.Client.CoreV1().Nodes()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{
		Name:   k.cfg.NodeName,
		Labels: map[string]string{corev1.LabelHostname: k.cfg.NodeName, corev1.LabelOSStable: "linux"},
	}}
	if _, err := nodes.Create(ctx, node, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("kubelet: create node: %w", err)
	}
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := nodes.Get(ctx, k.cfg.NodeName, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("kubelet: get node: %w", err)
		}
		now := metav1.Now()
		capacity := corev1.ResourceList{
			corev1.ResourceCPU:    resource.MustParse("2"),
			corev1.ResourceMemory: resource.MustParse("8Gi"),
			corev1.ResourcePods:   resource.MustParse("250"),
		}
		cur.Status = corev1.NodeStatus{
			Capacity:    capacity,
			Allocatable: capacity,
			Phase:       corev1.NodeRunning,
			Conditions: []corev1.NodeCondition{
				nodeCondition(corev1.NodeReady, corev1.ConditionTrue, "KubeletReady", "process kubelet is running", now),
				nodeCondition(corev1.NodeMemoryPressure, corev1.ConditionFalse, "KubeletHasSufficientMemory", "", now),
				nodeCondition(corev1.NodeDiskPressure, corev1.ConditionFalse, "KubeletHasNoDiskPressure", "", now),
				nodeCondition(corev1.NodePIDPressure, corev1.ConditionFalse, "KubeletHasSufficientPID", "", now),
			},
			// Only the address: the API server reaches the kubelet (for
			// pods/log) at the first address type it prefers, and the
			// node's name resolves nowhere.
			Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: k.hostIP()}},
			DaemonEndpoints: corev1.NodeDaemonEndpoints{
				KubeletEndpoint: corev1.DaemonEndpoint{Port: LogPort},
			},
			NodeInfo: corev1.NodeSystemInfo{
				OperatingSystem:         "linux",
				Architecture:            "amd64",
				KubeletVersion:          "process-kubelet",
				ContainerRuntimeVersion: "process://",
			},
		}
		_, err = nodes.UpdateStatus(ctx, cur, metav1.UpdateOptions{})
		return err
	})
}

func nodeCondition(t corev1.NodeConditionType, s corev1.ConditionStatus, reason, msg string, now metav1.Time) corev1.NodeCondition {
	return corev1.NodeCondition{Type: t, Status: s, Reason: reason, Message: msg, LastHeartbeatTime: now, LastTransitionTime: now}
}

// DeleteNode removes the Node object, for a tidy shutdown while the API
// server still runs.
func (k *Kubelet) DeleteNode(ctx context.Context) error {
	err := k.cfg.Client.CoreV1().Nodes().Delete(ctx, k.cfg.NodeName, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("kubelet: delete node: %w", err)
	}
	return nil
}

// WaitForNode polls until the Node reports Ready, for callers that start
// Run in a goroutine and want to know it registered.
func WaitForNode(ctx context.Context, c kubernetes.Interface, name string) error {
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		n, err := c.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, cond := range n.Status.Conditions {
			if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	})
}
