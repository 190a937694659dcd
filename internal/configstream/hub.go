package configstream

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"

	"portico.dev/portico/internal/controlplane/snapshot"
)

// Plane is one Gateway's data plane as the controller sees it.
type Plane struct {
	Gateway types.NamespacedName
	// ServiceAccount is the one provisioned for it, in the Gateway's
	// namespace: the only identity that may receive its snapshot.
	ServiceAccount string
	Resources      *snapshot.Resources
	// Keep keeps what was published for the Gateway before, if anything
	// (its Gateway is not accepted now); Resources is then unused.
	Keep bool
}

// Authenticator reviews a bearer token: the namespace and name of the
// ServiceAccount it belongs to, or an error (wrapping ErrReviewUnavailable
// when no verdict could be had).
type Authenticator func(ctx context.Context, token string) (namespace, serviceAccount string, err error)

// ErrReviewUnavailable is wrapped by an Authenticator's error when the
// token could not be reviewed (the API server unreachable, too many
// reviews): it says nothing against the token.
var ErrReviewUnavailable = errors.New("token review unavailable")

// Hub serves the data planes' streams. Build it with NewHub.
type Hub struct {
	auth Authenticator
	log  *zap.Logger
	// Heartbeat is the interval of heartbeats on a quiet stream;
	// StreamLifetime ends a stream (the data plane reconnects with a fresh
	// token) so that a token is never trusted long after it was reviewed.
	Heartbeat      time.Duration
	StreamLifetime time.Duration
	// BodyTimeout bounds the reading of an acknowledgement's body, which
	// is read before its token is reviewed: a client that withholds it
	// does not hold a connection for ever.
	BodyTimeout time.Duration
	// WriteTimeout bounds the writing of one line of a stream.
	WriteTimeout time.Duration
	// OnAck, when set, is told of every acknowledgement, with the name of
	// the plane's ServiceAccount (and so of its Deployment). It must not
	// block.
	OnAck func(gw types.NamespacedName, serviceAccount string, a Ack)
	// Challenges, when set, answers the ACME HTTP-01 challenges data
	// planes ask about (ChallengePath).
	Challenges ChallengeHandler
	// SessionKey, when set (SessionKeyLen bytes, the key every controller
	// replica shares), gives each data plane on its stream the key of its
	// Gateway (DeriveSessionKey, SessionKeyHeader). Unset: data planes
	// seal sessions with keys of their own.
	SessionKey []byte

	mu     sync.Mutex
	planes map[types.NamespacedName]*plane
	acks   map[types.NamespacedName]Ack
	// replaced are, by Gateway, the last versions replaced by newer ones
	// (Superseded).
	replaced map[types.NamespacedName][]string
}

// keepReplaced is how many replaced versions of a Gateway are remembered.
const keepReplaced = 16

type plane struct {
	serviceAccount string
	line           []byte
	version        string
	published      time.Time     // when this version replaced the one before
	inputs         []any         // the snapshot's objects, to skip encoding an unchanged one
	changed        chan struct{} // closed when replaced
	// hosts are the hostnames of the Gateway's listeners and its
	// ListenerSets': those whose ACME challenges its data plane may ask
	// about.
	hosts map[string]bool
}

// NewHub returns a Hub that authenticates data planes with auth.
func NewHub(auth Authenticator, log *zap.Logger) *Hub {
	return &Hub{auth: auth, log: log, Heartbeat: 10 * time.Second, StreamLifetime: 10 * time.Minute, BodyTimeout: 10 * time.Second, WriteTimeout: 30 * time.Second,
		planes: map[types.NamespacedName]*plane{}, acks: map[types.NamespacedName]Ack{}, replaced: map[types.NamespacedName][]string{}}
}

// Publish replaces the set of data planes. A plane whose snapshot holds
// the same objects as before keeps its version and wakes no stream; the
// streams of a plane that is gone end.
func (h *Hub) Publish(planes []Plane) {
	next := make(map[types.NamespacedName]*plane, len(planes))
	h.mu.Lock()
	prev := h.planes
	h.mu.Unlock()
	for _, p := range planes {
		if p.Keep {
			if old := prev[p.Gateway]; old != nil {
				next[p.Gateway] = old
			}
			continue
		}
		p.Resources = canonical(p.Resources)
		inputs := objectsOf(p.Resources)
		if old := prev[p.Gateway]; old != nil && old.serviceAccount == p.ServiceAccount && slices.Equal(old.inputs, inputs) {
			next[p.Gateway] = old
			continue
		}
		line, version, err := encode(p.Resources)
		if err != nil {
			h.log.Error("data plane snapshot not published", zap.Stringer("gateway", p.Gateway), zap.Error(err))
			if old := prev[p.Gateway]; old != nil {
				next[p.Gateway] = old
			}
			continue
		}
		if old := prev[p.Gateway]; old != nil && old.version == version && old.serviceAccount == p.ServiceAccount {
			old.inputs = inputs
			next[p.Gateway] = old
			continue
		}
		next[p.Gateway] = &plane{serviceAccount: p.ServiceAccount, line: line, version: version, published: time.Now(), inputs: inputs,
			changed: make(chan struct{}), hosts: listenerHosts(p.Resources)}
	}
	h.mu.Lock()
	h.planes = next
	for key := range h.acks {
		if next[key] == nil {
			delete(h.acks, key)
		}
	}
	for key, old := range prev {
		switch n := next[key]; {
		case n == nil:
			delete(h.replaced, key)
		case n.version != old.version:
			r := append(h.replaced[key], old.version)
			h.replaced[key] = r[max(0, len(r)-keepReplaced):]
		}
	}
	h.mu.Unlock()
	for key, old := range prev {
		if next[key] != old {
			close(old.changed)
		}
	}
}

// Version is the version of a Gateway's current snapshot and the last
// acknowledgement its data plane sent this controller replica.
func (h *Hub) Version(gw types.NamespacedName) (current string, acked Ack) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if p := h.planes[gw]; p != nil {
		current = p.version
	}
	return current, h.acks[gw]
}

// Published is the version of a Gateway's current snapshot and when this
// hub published it ("" when it has none).
func (h *Hub) Published(gw types.NamespacedName) (version string, at time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if p := h.planes[gw]; p != nil {
		return p.version, p.published
	}
	return "", time.Time{}
}

// Superseded reports whether version is one this hub published for gw
// and then replaced with a newer one (of the last few): an acknowledgement
// of it is out of date. A version it does not know may be one another
// controller replica published first.
func (h *Hub) Superseded(gw types.NamespacedName, version string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if p := h.planes[gw]; p != nil && p.version == version {
		return false
	}
	return slices.Contains(h.replaced[gw], version)
}

// objectsOf lists a snapshot's objects: their pointers change exactly when
// the objects do.
func objectsOf(r *snapshot.Resources) []any {
	var out []any
	add := func(kind string, n int, at func(int) any) {
		out = append(out, kind)
		for i := range n {
			out = append(out, at(i))
		}
	}
	add("GatewayClass", len(r.GatewayClasses), func(i int) any { return r.GatewayClasses[i] })
	add("Gateway", len(r.Gateways), func(i int) any { return r.Gateways[i] })
	add("ListenerSet", len(r.ListenerSets), func(i int) any { return r.ListenerSets[i] })
	add("HTTPRoute", len(r.HTTPRoutes), func(i int) any { return r.HTTPRoutes[i] })
	add("GRPCRoute", len(r.GRPCRoutes), func(i int) any { return r.GRPCRoutes[i] })
	add("TLSRoute", len(r.TLSRoutes), func(i int) any { return r.TLSRoutes[i] })
	add("TCPRoute", len(r.TCPRoutes), func(i int) any { return r.TCPRoutes[i] })
	add("UDPRoute", len(r.UDPRoutes), func(i int) any { return r.UDPRoutes[i] })
	add("ReferenceGrant", len(r.ReferenceGrants), func(i int) any { return r.ReferenceGrants[i] })
	add("BackendTLSPolicy", len(r.BackendTLSPolicies), func(i int) any { return r.BackendTLSPolicies[i] })
	add("ConfigMap", len(r.ConfigMaps), func(i int) any { return r.ConfigMaps[i] })
	add("ClusterTrustBundle", len(r.ClusterTrustBundles), func(i int) any { return r.ClusterTrustBundles[i] })
	add("Namespace", len(r.Namespaces), func(i int) any { return r.Namespaces[i] })
	add("Secret", len(r.Secrets), func(i int) any { return r.Secrets[i] })
	add("Service", len(r.Services), func(i int) any { return r.Services[i] })
	add("EndpointSlice", len(r.EndpointSlices), func(i int) any { return r.EndpointSlices[i] })
	add("Parameters", len(r.Parameters), func(i int) any { return r.Parameters[i] })
	add("BackendTrafficPolicy", len(r.TrafficPolicies), func(i int) any { return r.TrafficPolicies[i] })
	add("SecurityPolicy", len(r.SecurityPolicies), func(i int) any { return r.SecurityPolicies[i] })
	add("ClientTrafficPolicy", len(r.ClientPolicies), func(i int) any { return r.ClientPolicies[i] })
	add("XBackendTrafficPolicy", len(r.XTrafficPolicies), func(i int) any { return r.XTrafficPolicies[i] })
	// ACMEErrors is replaced, never modified: compare it by its content.
	keys := make([]string, 0, len(r.ACMEErrors))
	for k, v := range r.ACMEErrors {
		keys = append(keys, k+"="+v)
	}
	slices.Sort(keys)
	for _, k := range keys {
		out = append(out, k)
	}
	return out
}

// ServeHTTP serves StreamPath, AckPath and ChallengePath.
func (h *Hub) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.URL.Path == StreamPath && r.Method == http.MethodGet:
		h.stream(w, r)
	case r.URL.Path == AckPath && r.Method == http.MethodPost:
		h.ack(w, r)
	case r.URL.Path == ChallengePath && r.Method == http.MethodGet:
		h.challenge(w, r)
	default:
		http.NotFound(w, r)
	}
}

// authorize checks the request's token against the Gateway it asks for.
// In a namespace not the token's, unknown Gateways and foreign identities
// get the same answer, so that a data plane learns nothing about Gateways
// there.
func (h *Hub) authorize(w http.ResponseWriter, r *http.Request, gateway string) (types.NamespacedName, *plane, bool) {
	token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || token == "" {
		http.Error(w, "unauthorized", http.StatusUnauthorized)
		return types.NamespacedName{}, nil, false
	}
	ns, name, _ := strings.Cut(gateway, "/")
	key := types.NamespacedName{Namespace: ns, Name: name}
	saNS, sa, err := h.auth(r.Context(), token)
	if err != nil {
		h.log.Info("data plane refused", zap.String("gateway", gateway), zap.Error(err))
		http.Error(w, "unauthorized", http.StatusUnauthorized)
		return key, nil, false
	}
	h.mu.Lock()
	p := h.planes[key]
	h.mu.Unlock()
	if p == nil && saNS == key.Namespace {
		// Not published yet (a controller replica that just started) or
		// not a Gateway with a data plane: the data plane retries. Asked
		// from another namespace, this would tell which Gateways exist
		// there: that gets the answer a foreign identity gets.
		http.Error(w, "no configuration for this Gateway", http.StatusServiceUnavailable)
		return key, nil, false
	}
	if p == nil {
		http.Error(w, "forbidden", http.StatusForbidden)
		return key, nil, false
	}
	if !p.owner(saNS, sa, key) {
		h.log.Warn("data plane identity does not match its Gateway", zap.String("gateway", gateway),
			zap.String("serviceAccount", saNS+"/"+sa))
		http.Error(w, "forbidden", http.StatusForbidden)
		return key, nil, false
	}
	return key, p, true
}

// owner reports whether the ServiceAccount ns/sa is the one provisioned
// for the Gateway key.
func (p *plane) owner(ns, sa string, key types.NamespacedName) bool {
	return ns == key.Namespace && sa == p.serviceAccount
}

func (h *Hub) stream(w http.ResponseWriter, r *http.Request) {
	key, p, ok := h.authorize(w, r, r.URL.Query().Get("gateway"))
	if !ok {
		return
	}
	token := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "application/x-ndjson")
	if len(h.SessionKey) == SessionKeyLen {
		// Only to the Gateway's own ServiceAccount (authorize).
		w.Header().Set(SessionKeyHeader, hex.EncodeToString(DeriveSessionKey(h.SessionKey, key)))
	}
	w.WriteHeader(http.StatusOK)
	end := time.NewTimer(h.StreamLifetime)
	defer end.Stop()
	beat := time.NewTicker(h.Heartbeat)
	defer beat.Stop()
	sa := p.serviceAccount
	for {
		if !h.writeLine(w, rc, p.line) {
			return
		}
		// Until the snapshot changes: heartbeats.
		for waiting := true; waiting; {
			select {
			case <-r.Context().Done():
				return
			case <-end.C:
				return
			case <-beat.C:
				if !h.writeLine(w, rc, []byte("{}\n")) {
					return
				}
			case <-p.changed:
				waiting = false
			}
		}
		h.mu.Lock()
		p = h.planes[key]
		h.mu.Unlock()
		if p == nil || p.serviceAccount != sa {
			return // the Gateway left, or changed hands: ask again
		}
		// A new snapshot goes only to a token that still passes review
		// (answers are cached briefly): one revoked since the stream began
		// (its pod or ServiceAccount deleted) gets nothing more. A review
		// that could not be made says nothing against the token: ending
		// every stream at a change that reaches them all would only bring
		// their reconnections, and more reviews, at once.
		ns, name, err := h.auth(r.Context(), token)
		if errors.Is(err, ErrReviewUnavailable) {
			ns, name, err = key.Namespace, sa, nil
		}
		if err != nil || !p.owner(ns, name, key) {
			h.log.Info("data plane stream ended: its token no longer passes review", zap.Stringer("gateway", key), zap.Error(err))
			return
		}
	}
}

// writeLine writes and flushes one line within WriteTimeout: a data plane
// that stops reading its stream does not hold the hub's goroutine and
// connection until the stream's lifetime ends (the timer is not looked at
// while a write blocks).
func (h *Hub) writeLine(w http.ResponseWriter, rc *http.ResponseController, line []byte) bool {
	_ = rc.SetWriteDeadline(time.Now().Add(h.WriteTimeout))
	if _, err := w.Write(line); err != nil {
		return false
	}
	return rc.Flush() == nil
}

// maxAck bounds an acknowledgement's body, maxAckError the error it
// carries on (logged, and passed to OnAck).
const (
	maxAck      = 64 << 10
	maxAckError = 2 << 10
)

// versionPattern is what encode makes a version: a hash's first 12 bytes
// in hex. An acknowledgement's version ends up in an annotation.
var versionPattern = regexp.MustCompile(`^[0-9a-f]{24}$`)

func (h *Hub) ack(w http.ResponseWriter, r *http.Request) {
	_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(h.BodyTimeout))
	var a Ack
	err := json.NewDecoder(io.LimitReader(r.Body, maxAck)).Decode(&a)
	if err == nil && (!versionPattern.MatchString(a.Version) || (a.Pod != "" && len(validation.IsDNS1123Subdomain(a.Pod)) > 0)) {
		err = errors.New("not an acknowledgement")
	}
	if err != nil {
		http.Error(w, "bad acknowledgement", http.StatusBadRequest)
		return
	}
	if len(a.Error) > maxAckError {
		a.Error = a.Error[:maxAckError] + "..."
	}
	key, p, ok := h.authorize(w, r, a.Gateway)
	if !ok {
		return
	}
	h.mu.Lock()
	h.acks[key] = a
	h.mu.Unlock()
	if h.OnAck != nil {
		h.OnAck(key, p.serviceAccount, a)
	}
	if a.Error != "" {
		h.log.Warn("data plane could not apply everything", zap.Stringer("gateway", key), zap.String("pod", a.Pod),
			zap.String("version", a.Version), zap.String("error", a.Error))
	}
	w.WriteHeader(http.StatusNoContent)
}
