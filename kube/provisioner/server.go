package provisioner

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/flowcontrol"

	"portico.dev/portico/internal/configstream"
	"portico.dev/portico/internal/controlplane/provision"
	"portico.dev/portico/internal/controlplane/snapshot"
	"portico.dev/portico/internal/controlplane/wellknown"
	"portico.dev/portico/translate"
)

// TokenReviewer authenticates data planes: it has the API server review a
// token for the data-plane audience and returns the ServiceAccount it
// belongs to. Answers are kept for a minute, and concurrent questions about
// one token share one review, so that a data plane's acknowledgements do
// not each cost a request. Reviews of tokens not kept are rate limited
// (reviewQPS, reviewBurst): anyone who reaches the hub can send tokens,
// and the reviews share the API client's rate limit with leader election
// and status writes; a token refused for that is not remembered, and its
// data plane retries.
func TokenReviewer(kube kubernetes.Interface) configstream.Authenticator {
	limit := flowcontrol.NewTokenBucketRateLimiter(reviewQPS, reviewBurst)
	type verdict struct {
		ns, sa string
		err    error
		at     time.Time
		done   chan struct{} // closed once the fields are set
	}
	var mu sync.Mutex
	cache := map[[32]byte]*verdict{}
	return func(ctx context.Context, token string) (string, string, error) {
		key := sha256.Sum256([]byte(token))
		mu.Lock()
		v, ok := cache[key]
		if ok {
			select {
			case <-v.done:
				if time.Since(v.at) >= time.Minute || errors.Is(v.err, errReviewUnavailable) {
					ok = false
				}
			default: // in flight: wait for it below
			}
		}
		if !ok && !limit.TryAccept() {
			mu.Unlock()
			return "", "", fmt.Errorf("%w: too many reviews", errReviewUnavailable)
		}
		if !ok {
			for k, old := range cache {
				select {
				case <-old.done:
					if time.Since(old.at) >= time.Minute {
						delete(cache, k)
					}
				default:
				}
			}
			v = &verdict{done: make(chan struct{})}
			cache[key] = v
			mu.Unlock()
			review, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			v.ns, v.sa, v.err = reviewToken(review, kube, token)
			cancel()
			v.at = time.Now()
			close(v.done)
		} else {
			mu.Unlock()
		}
		select {
		case <-v.done:
			return v.ns, v.sa, v.err
		case <-ctx.Done():
			return "", "", ctx.Err()
		}
	}
}

// The rate of token reviews: a data plane's token is reviewed about once a
// minute while it acknowledges, so this is room for about a thousand busy
// data planes, and leaves most of the API client's default rate (50) to
// the controller.
const (
	reviewQPS   = 20
	reviewBurst = 100
)

// errReviewUnavailable marks a review that could not be made (the API
// server unreachable, too many reviews): it is not kept as a verdict on
// the token.
var errReviewUnavailable = configstream.ErrReviewUnavailable

func reviewToken(ctx context.Context, kube kubernetes.Interface, token string) (string, string, error) {
	tr, err := kube.AuthenticationV1().TokenReviews().Create(ctx, &authnv1.TokenReview{
		Spec: authnv1.TokenReviewSpec{Token: token, Audiences: []string{provision.TokenAudience}},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", "", fmt.Errorf("%w: %w", errReviewUnavailable, err)
	}
	st := tr.Status
	if !st.Authenticated {
		return "", "", fmt.Errorf("token not authenticated: %s", st.Error)
	}
	if !slices.Contains(st.Audiences, provision.TokenAudience) {
		return "", "", errors.New("token not meant for Portico's data planes")
	}
	parts := strings.Split(st.User.Username, ":")
	if len(parts) != 4 || parts[0] != "system" || parts[1] != "serviceaccount" {
		return "", "", fmt.Errorf("%q is not a ServiceAccount", st.User.Username)
	}
	return parts[2], parts[3], nil
}

// ServerCertificate is the certificate the controller serves data
// planes with, kept in the Secret ns/name so that every replica serves the
// same one: it is created (self-signed, for the host of controllerAddr)
// when it does not exist. The PEM of the certificate is what data planes
// trust.
func ServerCertificate(ctx context.Context, kube kubernetes.Interface, ns, name, controllerAddr string) (tls.Certificate, []byte, error) {
	secrets := kube.CoreV1().Secrets(ns)
	s, err := secrets.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		var certPEM, keyPEM []byte
		if certPEM, keyPEM, err = selfSigned(controllerAddr); err != nil {
			return tls.Certificate{}, nil, err
		}
		s = &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{wellknown.ManagedByLabel: wellknown.ManagedByValue}},
			Type:       corev1.SecretTypeTLS,
			Data:       map[string][]byte{corev1.TLSCertKey: certPEM, corev1.TLSPrivateKeyKey: keyPEM},
		}
		created, cerr := secrets.Create(ctx, s, metav1.CreateOptions{})
		switch {
		case apierrors.IsAlreadyExists(cerr): // another replica was first
			s, err = secrets.Get(ctx, name, metav1.GetOptions{})
		case cerr != nil:
			err = cerr
		default:
			s, err = created, nil
		}
	}
	if err != nil {
		return tls.Certificate{}, nil, fmt.Errorf("data plane certificate %s/%s: %w", ns, name, err)
	}
	cert, err := tls.X509KeyPair(s.Data[corev1.TLSCertKey], s.Data[corev1.TLSPrivateKeyKey])
	if err != nil {
		return tls.Certificate{}, nil, fmt.Errorf("data plane certificate %s/%s: %w", ns, name, err)
	}
	return cert, s.Data[corev1.TLSCertKey], nil
}

func selfSigned(controllerAddr string) ([]byte, []byte, error) {
	host, _, err := net.SplitHostPort(controllerAddr)
	if err != nil {
		host = controllerAddr
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "portico data plane controller"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().AddDate(10, 0, 0),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	if ip := net.ParseIP(host); ip != nil {
		tmpl.IPAddresses = []net.IP{ip}
	} else {
		tmpl.DNSNames = []string{host}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), nil
}

// Server serves data planes their configuration: the hub, over TLS, with
// the certificate every replica shares (ServerCertificate). Data planes
// authenticate with their ServiceAccount's token (TokenReviewer), and
// their acknowledgements are recorded on their Deployments.
type Server struct {
	hub  *configstream.Hub
	ln   net.Listener
	cert tls.Certificate
	log  *zap.Logger
	// CA is the PEM of the certificate data planes are to trust
	// (provision.Settings.ControllerCA).
	CA []byte
}

// ServerOptions say where a Server listens and where its certificate is
// kept.
type ServerOptions struct {
	// Listen is the address to listen on.
	Listen string
	// Namespace and Secret name the Secret of the certificate (created
	// when missing); Secret "" means portico-data-plane-tls.
	Namespace, Secret string
	// Controller is the address data planes dial, whose host a created
	// certificate is for.
	Controller string
	// Challenges answer the ACME HTTP-01 challenges data planes are sent;
	// nil answers none.
	Challenges configstream.ChallengeHandler
	// SessionKey is the session key the controller replicas share (nil:
	// none; data planes then seal sessions with keys of their own).
	SessionKey []byte
}

// Listen reads (or creates) the server's certificate and binds its
// listener; Run serves.
func Listen(ctx context.Context, kube kubernetes.Interface, o ServerOptions, log *zap.Logger) (*Server, error) {
	if o.Secret == "" {
		o.Secret = "portico-data-plane-tls"
	}
	cert, caPEM, err := ServerCertificate(ctx, kube, o.Namespace, o.Secret, o.Controller)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", o.Listen)
	if err != nil {
		return nil, fmt.Errorf("data plane listener: %w", err)
	}
	hub := configstream.NewHub(TokenReviewer(kube), log)
	hub.OnAck = newAckWriter(kube, hub.Superseded, log).record
	hub.Challenges = o.Challenges
	hub.SessionKey = o.SessionKey
	log.Info("serving data planes", zap.Stringer("address", ln.Addr()))
	return &Server{hub: hub, ln: ln, cert: cert, log: log, CA: caPEM}, nil
}

// Publish hands the hub the snapshot of every data plane, scoped to its
// Gateway.
func (s *Server) Publish(inputs []provision.Input, res *snapshot.Resources) {
	s.hub.Publish(planes(inputs, res))
}

// Version is the configuration version last published for the Gateway gw,
// and the acknowledgement its data plane last sent (configstream.Hub).
func (s *Server) Version(gw types.NamespacedName) (string, configstream.Ack) {
	return s.hub.Version(gw)
}

// Published is the configuration version last published for the Gateway
// gw and when (configstream.Hub.Published).
func (s *Server) Published(gw types.NamespacedName) (string, time.Time) {
	return s.hub.Published(gw)
}

// Run serves until ctx ends.
func (s *Server) Run(ctx context.Context) {
	srv := &http.Server{
		Handler:           s.hub,
		TLSConfig:         &tls.Config{Certificates: []tls.Certificate{s.cert}, MinVersion: tls.VersionTLS12},
		ReadHeaderTimeout: 10 * time.Second,
		// Streams are long; heartbeats keep them written.
		IdleTimeout: 2 * time.Minute,
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.ServeTLS(s.ln, "", ""); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("data plane server stopped", zap.Error(err))
		}
	}()
	<-ctx.Done()
	shutdown, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = srv.Shutdown(shutdown)
	_ = srv.Close() // streams do not end by themselves
	<-done
}

// planes are the snapshots of every data plane. A Gateway that is not
// accepted keeps what its data plane was sent before: a typo must not take
// it down.
func planes(inputs []provision.Input, res *snapshot.Resources) []configstream.Plane {
	out := make([]configstream.Plane, 0, len(inputs))
	holders := provision.Holders(inputs)
	for _, in := range inputs {
		key := types.NamespacedName{Namespace: in.Gateway.Namespace, Name: in.Gateway.Name}
		name := provision.Name(in.Gateway.Name, in.ClassName)
		if holders[[2]string{key.Namespace, name}] != in.Gateway {
			continue // its data plane's name is another Gateway's
		}
		p := configstream.Plane{Gateway: key, ServiceAccount: name, Keep: !in.Accepted}
		if in.Accepted {
			p.Resources = translate.Scope(res, key)
		}
		out = append(out, p)
	}
	return out
}
