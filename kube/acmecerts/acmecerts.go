// Package acmecerts puts the certificates ACME obtains into the cluster:
// into the Secrets of the listeners that want them (translate's ACME
// wants), and their outcomes as Events on the Gateways and ListenerSets
// that declare the hostnames.
package acmecerts

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
	gatewayclient "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"

	"portico.dev/portico/internal/controlplane/acme"
	"portico.dev/portico/internal/controlplane/wellknown"
	"portico.dev/portico/internal/shared/hostname"
	"portico.dev/portico/translate"
)

// requestTimeout bounds one write or list of the API server.
const requestTimeout = 10 * time.Second

// WriteSecrets writes the certificate the manager holds for each of
// wanted into its Secret, when that Secret is missing or is Portico's and
// holds something else. A Secret that is not Portico's is never written
// (translate leaves such listeners out of wanted; this checks again
// against the same snapshot). The informer then brings the Secret to
// translate like any other. Every replica may write: they hold the same
// certificate from the shared storage, and a lost race is harmless.
func WriteSecrets(ctx context.Context, client kubernetes.Interface, mgr *acme.Manager, wanted []translate.ACMECertificate, secrets []*corev1.Secret, log *zap.Logger) {
	if len(wanted) == 0 {
		return
	}
	existing := make(map[types.NamespacedName]*corev1.Secret, len(secrets))
	for _, s := range secrets {
		existing[types.NamespacedName{Namespace: s.Namespace, Name: s.Name}] = s
	}
	done := map[types.NamespacedName]bool{}
	for _, c := range wanted {
		if done[c.Secret] {
			continue // two listeners, one Secret: the first hostname wins
		}
		done[c.Secret] = true
		cert, ok := mgr.Certificate(c.Hostname)
		if !ok {
			continue
		}
		if err := writeSecret(ctx, client, c, cert, existing[c.Secret]); err != nil {
			log.Error("ACME certificate not written to its Secret", zap.String("hostname", c.Hostname), zap.Stringer("secret", c.Secret), zap.Error(err))
		}
	}
}

func writeSecret(ctx context.Context, client kubernetes.Interface, c translate.ACMECertificate, cert acme.Certificate, cur *corev1.Secret) error {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	want := translate.ManagedSecret(c, cert.CertPEM, cert.KeyPEM)
	secrets := client.CoreV1().Secrets(c.Secret.Namespace)
	if cur == nil {
		_, err := secrets.Create(ctx, want, metav1.CreateOptions{FieldManager: wellknown.FieldManager})
		if apierrors.IsAlreadyExists(err) {
			return nil // another replica, or a user: the informer will tell
		}
		if err != nil {
			return fmt.Errorf("create: %w", err)
		}
		return nil
	}
	if !translate.IsManaged(cur) {
		return nil
	}
	if bytes.Equal(cur.Data[corev1.TLSCertKey], cert.CertPEM) && bytes.Equal(cur.Data[corev1.TLSPrivateKeyKey], cert.KeyPEM) &&
		cur.Annotations[wellknown.ACMEHostnameAnnotation] == c.Hostname {
		return nil
	}
	next := cur.DeepCopy()
	next.Data = want.Data
	next.Labels = maps.Clone(cur.Labels)
	next.Labels[wellknown.ManagedByLabel] = wellknown.ManagedByValue
	next.Annotations = maps.Clone(cur.Annotations)
	if next.Annotations == nil {
		next.Annotations = map[string]string{}
	}
	next.Annotations[wellknown.ACMEHostnameAnnotation] = c.Hostname
	// The resourceVersion of the snapshot makes a write over a newer
	// Secret fail rather than clobber it; the next rebuild looks again.
	if _, err := secrets.Update(ctx, next, metav1.UpdateOptions{FieldManager: wellknown.FieldManager}); err != nil && !apierrors.IsConflict(err) {
		return fmt.Errorf("update: %w", err)
	}
	return nil
}

// Reasons of the Events that Events records.
const (
	ReasonCertificateIssued        = "CertificateIssued"
	ReasonCertificateRenewed       = "CertificateRenewed"
	ReasonCertificateOrderFailed   = "CertificateOrderFailed"
	ReasonCertificateRenewalFailed = "CertificateRenewalFailed"
)

// eventQueue bounds the ACME outcomes waiting to be recorded; beyond it
// they are dropped (and logged), as the manager must never wait.
const eventQueue = 256

// Events records ACME outcomes as Kubernetes Events on the Gateways and
// ListenerSets that declare the hostname with the ACME annotation, where
// "kubectl describe" shows them next to the listener's status. It is fed
// by the manager's OnEvent, which tells only the replica that placed the
// order or renewal, so every outcome is recorded once, whichever replica
// leads.
type Events struct {
	gateway gatewayclient.Interface
	// namespaces lists the namespaces of the Secrets wanted for a
	// hostname, in the latest batch of wants.
	namespaces  func(host string) []string
	log         *zap.Logger
	broadcaster record.EventBroadcaster
	recorder    record.EventRecorder
	queue       chan acme.Event
	done        chan struct{}
}

// NewEvents starts recording; identity names the replica in the Events'
// source, and namespaces lists those of the Secrets wanted for a hostname,
// where its Gateways and ListenerSets are. Close stops it.
func NewEvents(kube kubernetes.Interface, gateway gatewayclient.Interface, identity string, namespaces func(host string) []string, log *zap.Logger) *Events {
	b := record.NewBroadcaster()
	// Events("") writes each Event into its involved object's namespace.
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: kube.CoreV1().Events("")})
	e := &Events{
		gateway:     gateway,
		namespaces:  namespaces,
		log:         log,
		broadcaster: b,
		recorder:    b.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "portico", Host: identity}),
		queue:       make(chan acme.Event, eventQueue),
		done:        make(chan struct{}),
	}
	go e.run()
	return e
}

// Record queues ev; it never blocks. Use it as acme.Options.OnEvent.
func (e *Events) Record(ev acme.Event) {
	select {
	case e.queue <- ev:
	default:
		e.log.Warn("ACME event not recorded: queue full", zap.String("hostname", ev.Hostname), zap.String("event", ev.Kind))
	}
}

// Close records what is queued and stops. Record must not be called after.
func (e *Events) Close() {
	close(e.queue)
	<-e.done
	e.broadcaster.Shutdown()
}

func (e *Events) run() {
	defer close(e.done)
	for ev := range e.queue {
		e.record(ev)
	}
}

func (e *Events) record(ev acme.Event) {
	eventType, reason, msg := corev1.EventTypeNormal, "", ""
	switch ev.Kind {
	case "obtained":
		reason, msg = ReasonCertificateIssued, fmt.Sprintf("certificate for %s issued", ev.Hostname)
	case "renewed":
		reason, msg = ReasonCertificateRenewed, fmt.Sprintf("certificate for %s renewed", ev.Hostname)
	case "failed":
		eventType, reason, msg = corev1.EventTypeWarning, ReasonCertificateOrderFailed, fmt.Sprintf("certificate order for %s failed: %s", ev.Hostname, shortError(ev.Err))
	case "renew_failed":
		eventType, reason, msg = corev1.EventTypeWarning, ReasonCertificateRenewalFailed, fmt.Sprintf("certificate renewal for %s failed: %s", ev.Hostname, shortError(ev.Err))
	default:
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	defer cancel()
	refs, err := e.declaring(ctx, ev.Hostname)
	if err != nil {
		e.log.Warn("ACME event not recorded", zap.String("hostname", ev.Hostname), zap.String("reason", reason), zap.Error(err))
		return
	}
	for _, ref := range refs {
		e.recorder.Event(ref, eventType, reason, msg)
	}
}

// declaring finds the opted-in Gateways and ListenerSets with an HTTPS
// listener for host. They are in the namespaces of the Secrets wanted for
// host (a listener's certificate Secret is in its own namespace), read
// from the API: outcomes are rare, and the informers' caches are the
// source's.
func (e *Events) declaring(ctx context.Context, host string) ([]*corev1.ObjectReference, error) {
	declares := func(proto gwv1.ProtocolType, h *gwv1.Hostname) bool {
		return proto == gwv1.HTTPSProtocolType && h != nil && hostname.Normalize(string(*h)) == host
	}
	ref := func(kind string, obj metav1.Object) *corev1.ObjectReference {
		return &corev1.ObjectReference{APIVersion: gwv1.GroupVersion.String(), Kind: kind, Namespace: obj.GetNamespace(), Name: obj.GetName(), UID: obj.GetUID()}
	}
	var out []*corev1.ObjectReference
	for _, ns := range e.namespaces(host) {
		lss, err := e.gateway.GatewayV1().ListenerSets(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, fmt.Errorf("listing ListenerSets in %s: %w", ns, err)
		}
		for i := range lss.Items {
			ls := &lss.Items[i]
			if ls.Annotations[wellknown.ACMEAnnotation] == wellknown.ACMEHTTP01 && slices.ContainsFunc(ls.Spec.Listeners, func(l gwv1.ListenerEntry) bool { return declares(l.Protocol, l.Hostname) }) {
				out = append(out, ref("ListenerSet", ls))
			}
		}
		gws, err := e.gateway.GatewayV1().Gateways(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, fmt.Errorf("listing Gateways in %s: %w", ns, err)
		}
		for i := range gws.Items {
			gw := &gws.Items[i]
			if gw.Annotations[wellknown.ACMEAnnotation] == wellknown.ACMEHTTP01 && slices.ContainsFunc(gw.Spec.Listeners, func(l gwv1.Listener) bool { return declares(l.Protocol, l.Hostname) }) {
				out = append(out, ref("Gateway", gw))
			}
		}
	}
	return out, nil
}

// shortError keeps an Event's message readable: ACME errors can carry
// whole problem documents.
func shortError(err error) string {
	if err == nil {
		return "unknown error"
	}
	msg := err.Error()
	if len(msg) > 400 {
		msg = msg[:400] + "..."
	}
	return msg
}
