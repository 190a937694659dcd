// Package clientpolicy holds ClientTrafficPolicy (group portico.dev),
// Portico's policy of how clients reach a Gateway, attached by GEP-713
// targetRefs to Gateways and ListenerSets, or one of their listeners by
// sectionName: how the client's address is found (X-Forwarded-For from
// trusted proxies, a header of its own, the PROXY protocol), and local
// rate limits (of those, or of HTTPRoutes). It defines
// the object and the rules its CRD's schema states, checked again here for
// objects that reach translate without an API server (standalone files);
// which policy applies where is decided by translate.
package clientpolicy

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net/netip"
	"net/textproto"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"portico.dev/portico/config"
	"portico.dev/portico/internal/controlplane/policytarget"
	"portico.dev/portico/internal/shared/jsoncopy"
	"portico.dev/portico/sni"
)

// Group, Version and Kind of ClientTrafficPolicy.
const (
	Group   = "portico.dev"
	Version = "v1alpha1"
	Kind    = "ClientTrafficPolicy"
	// APIVersion is Group/Version.
	APIVersion = Group + "/" + Version
	// Resource is its plural, as the API serves it.
	Resource = "clienttrafficpolicies"
)

// Bounds the CRD states.
const (
	MaxTargets     = 16
	MaxCIDRs       = 32
	MaxTrustedHops = 32
)

// ClientTrafficPolicy says how clients reach the listeners it targets.
type ClientTrafficPolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              Spec `json:"spec"`
	// Status has one entry per ancestor (GEP-713): the Gateway of each
	// target, or the target itself when it does not exist.
	Status gwv1.PolicyStatus `json:"status,omitempty"`
}

// Spec is what a ClientTrafficPolicy sets. Each section set by several
// policies that apply to a listener comes from the most specific of them:
// the listener's own (sectionName), its ListenerSet's, its Gateway's.
type Spec struct {
	TargetRefs []gwv1.LocalPolicyTargetReferenceWithSectionName `json:"targetRefs"`
	// ClientIPDetection says where the client's address comes from when
	// proxies stand in front. Unset: the connection's peer (or what its
	// PROXY protocol header says).
	ClientIPDetection *ClientIPDetection `json:"clientIPDetection,omitempty"`
	// ProxyProtocol reads a PROXY protocol header (v1 or v2) at the start
	// of each connection, before TLS. It is a setting of the port: the
	// listeners sharing a port share the first of theirs.
	ProxyProtocol *ProxyProtocol `json:"proxyProtocol,omitempty"`
	// RateLimit is a local rate limit of what the policy targets: each
	// listener (a Gateway's or ListenerSet's, or the one named), or the
	// HTTPRoute (its one rule by sectionName). A request's rule takes the
	// most specific: its own, its route's, its listener's, its
	// ListenerSet's, its Gateway's.
	RateLimit *RateLimit `json:"rateLimit,omitempty"`
	// TLS are the handshake settings of the HTTPS listeners it targets.
	TLS *TLSSettings `json:"tls,omitempty"`
	// HTTP are limits of the requests of the listeners targeted,
	// stricter than the port's (flags).
	HTTP *HTTPSettings `json:"http,omitempty"`
}

// HTTPSettings: the most header bytes (names, values and 4 bytes a
// field) and header fields a request may have (431 over them), and the
// time a request has to be answered where its route sets none.
type HTTPSettings struct {
	MaxHeaderBytes *int32         `json:"maxHeaderBytes,omitempty"`
	MaxHeaderCount *int32         `json:"maxHeaderCount,omitempty"`
	RequestTimeout *gwv1.Duration `json:"requestTimeout,omitempty"`
	// HTTP1 are the settings of HTTP/1 connections: those whose TLS
	// handshake chose the listener, or whose last request it served.
	HTTP1 *HTTP1Settings `json:"http1,omitempty"`
	// HTTP2 are the settings of HTTP/2 connections whose TLS handshake
	// chose the listener. A cleartext connection (h2c) names no listener
	// before its first request: it takes the strictest of its port's.
	HTTP2 *HTTP2Settings `json:"http2,omitempty"`
}

// HTTP1Settings: how long a kept-alive connection may wait for its next
// request (idleTimeout), and how long a client has to send a request's
// head (headerTimeout, counted from the connection's start for its first
// request). A cleartext connection names no listener before its first
// request: that one takes the strictest of its port's listeners.
type HTTP1Settings struct {
	IdleTimeout   *gwv1.Duration `json:"idleTimeout,omitempty"`
	HeaderTimeout *gwv1.Duration `json:"headerTimeout,omitempty"`
}

// HTTP2Settings: the streams a client may have open at once, and how long
// a connection without a stream stays open.
type HTTP2Settings struct {
	MaxConcurrentStreams *int32         `json:"maxConcurrentStreams,omitempty"`
	IdleTimeout          *gwv1.Duration `json:"idleTimeout,omitempty"`
}

func (h *HTTPSettings) errors() []string {
	var errs []string
	if v := h.MaxHeaderBytes; v != nil && (*v < 64 || *v > 1<<20) {
		errs = append(errs, fmt.Sprintf("spec.http.maxHeaderBytes: %d is not between 64 and 1048576", *v))
	}
	if v := h.MaxHeaderCount; v != nil && (*v < 1 || *v > 10000) {
		errs = append(errs, fmt.Sprintf("spec.http.maxHeaderCount: %d is not between 1 and 10000", *v))
	}
	if v := h.RequestTimeout; v != nil {
		if d, err := time.ParseDuration(string(*v)); err != nil || d < time.Millisecond || d > 24*time.Hour {
			errs = append(errs, fmt.Sprintf("spec.http.requestTimeout: %q is not a duration between 1ms and 24h", *v))
		}
	}
	if h1 := h.HTTP1; h1 != nil {
		if h1.IdleTimeout == nil && h1.HeaderTimeout == nil {
			errs = append(errs, "spec.http.http1: at least one of idleTimeout, headerTimeout is needed")
		}
		if v := h1.IdleTimeout; v != nil {
			if d, err := time.ParseDuration(string(*v)); err != nil || d < time.Second || d > 24*time.Hour {
				errs = append(errs, fmt.Sprintf("spec.http.http1.idleTimeout: %q is not a duration between 1s and 24h", *v))
			}
		}
		if v := h1.HeaderTimeout; v != nil {
			if d, err := time.ParseDuration(string(*v)); err != nil || d < 100*time.Millisecond || d > time.Hour {
				errs = append(errs, fmt.Sprintf("spec.http.http1.headerTimeout: %q is not a duration between 100ms and 1h", *v))
			}
		}
	}
	if h2 := h.HTTP2; h2 != nil {
		if v := h2.MaxConcurrentStreams; v != nil && (*v < 1 || *v > 10000) {
			errs = append(errs, fmt.Sprintf("spec.http.http2.maxConcurrentStreams: %d is not between 1 and 10000", *v))
		}
		if v := h2.IdleTimeout; v != nil {
			if d, err := time.ParseDuration(string(*v)); err != nil || d < time.Second || d > 24*time.Hour {
				errs = append(errs, fmt.Sprintf("spec.http.http2.idleTimeout: %q is not a duration between 1s and 24h", *v))
			}
		}
	}
	return errs
}

// Timeout is the request timeout h sets, 0 for none. h must be valid.
func (h *HTTPSettings) Timeout() time.Duration {
	if h == nil || h.RequestTimeout == nil {
		return 0
	}
	d, _ := time.ParseDuration(string(*h.RequestTimeout))
	return d
}

// TLSSettings: TLS versions ("1.2", "1.3"), the TLS 1.2 cipher suites
// (IANA names), the ALPN protocols (h2, http/1.1) offered, and session
// tickets. Unset fields keep Portico's: TLS 1.2 to 1.3, Go's suites, h2
// then http/1.1, tickets on.
type TLSSettings struct {
	MinVersion            string   `json:"minVersion,omitempty"`
	MaxVersion            string   `json:"maxVersion,omitempty"`
	Ciphers               []string `json:"ciphers,omitempty"`
	ALPNProtocols         []string `json:"alpnProtocols,omitempty"`
	DisableSessionTickets bool     `json:"disableSessionTickets,omitempty"`
}

var tlsVersions = map[string]uint16{"1.2": tls.VersionTLS12, "1.3": tls.VersionTLS13}

// tls12Suite is the ID of a TLS 1.2 suite crypto/tls deems secure, by name.
func tls12Suite(name string) (uint16, bool) {
	for _, s := range tls.CipherSuites() {
		if s.Name == name && slices.Contains(s.SupportedVersions, tls.VersionTLS12) {
			return s.ID, true
		}
	}
	return 0, false
}

func (ts *TLSSettings) errors() []string {
	var errs []string
	add := func(format string, a ...any) { errs = append(errs, fmt.Sprintf(format, a...)) }
	minV, okMin := tlsVersions[ts.MinVersion]
	maxV, okMax := tlsVersions[ts.MaxVersion]
	if ts.MinVersion != "" && !okMin {
		add("spec.tls.minVersion: %q is not one of 1.2, 1.3", ts.MinVersion)
	}
	if ts.MaxVersion != "" && !okMax {
		add("spec.tls.maxVersion: %q is not one of 1.2, 1.3", ts.MaxVersion)
	}
	if okMin && okMax && minV > maxV {
		add("spec.tls: minVersion %s is above maxVersion %s", ts.MinVersion, ts.MaxVersion)
	}
	if len(ts.Ciphers) > 0 && minV == tls.VersionTLS13 {
		add("spec.tls.ciphers: TLS 1.3's suites are not configurable; set ciphers with TLS 1.2 allowed")
	}
	for i, c := range ts.Ciphers {
		if _, ok := tls12Suite(c); !ok {
			add("spec.tls.ciphers[%d]: %q is not a secure TLS 1.2 cipher suite", i, c)
		}
	}
	for i, p := range ts.ALPNProtocols {
		if p != "h2" && p != "http/1.1" {
			add("spec.tls.alpnProtocols[%d]: %q is not one of h2, http/1.1", i, p)
		}
		if slices.Contains(ts.ALPNProtocols[:i], p) {
			add("spec.tls.alpnProtocols[%d]: %q is listed twice", i, p)
		}
	}
	return errs
}

// Config is ts as the data plane's configuration says it. ts must be
// valid.
func (ts *TLSSettings) Config() *sni.Settings {
	out := &sni.Settings{MinVersion: tlsVersions[ts.MinVersion], MaxVersion: tlsVersions[ts.MaxVersion],
		NextProtos: slices.Clone(ts.ALPNProtocols), SessionTicketsDisabled: ts.DisableSessionTickets}
	for _, c := range ts.Ciphers {
		id, _ := tls12Suite(c)
		out.CipherSuites = append(out.CipherSuites, id)
	}
	return out
}

// RateLimit is a token bucket per key: at most burst requests at once,
// refilled with requests every unit.
type RateLimit struct {
	Requests int64         `json:"requests"`
	Unit     RateLimitUnit `json:"unit"`
	// Burst is the bucket's size; unset: requests.
	Burst *int64 `json:"burst,omitempty"`
	// Key says what a bucket is kept for; unset: one for the whole
	// target.
	Key *RateLimitKey `json:"key,omitempty"`
	// MaxKeys bounds the buckets kept for a ClientAddress or Header key
	// (the least recently used go first); unset: 100000.
	MaxKeys *int32 `json:"maxKeys,omitempty"`
}

// RateLimitUnit is the time requests are counted over.
type RateLimitUnit string

const (
	Second RateLimitUnit = "Second"
	Minute RateLimitUnit = "Minute"
	Hour   RateLimitUnit = "Hour"
)

var unitDurations = map[RateLimitUnit]time.Duration{Second: time.Second, Minute: time.Minute, Hour: time.Hour}

// RateLimitKey: type Target, ClientAddress (as clientIPDetection finds
// it) or Header (with header.name; requests without it share a bucket).
type RateLimitKey struct {
	Type   config.RateLimitKey `json:"type"`
	Header *HeaderName         `json:"header,omitempty"`
}

// HeaderName names a header.
type HeaderName struct {
	Name string `json:"name"`
}

// Bounds of RateLimit.
const (
	MaxRequests = 1_000_000_000
	MaxKeys     = 1_000_000
)

// ClientIPDetection: exactly one of xForwardedFor and customHeader.
type ClientIPDetection struct {
	XForwardedFor *XForwardedFor `json:"xForwardedFor,omitempty"`
	CustomHeader  *CustomHeader  `json:"customHeader,omitempty"`
}

// XForwardedFor: exactly one of numTrustedHops and trustedCIDRs.
type XForwardedFor struct {
	// NumTrustedHops is how many proxies in front are trusted: the client
	// is that many entries from the right of X-Forwarded-For.
	NumTrustedHops *int32 `json:"numTrustedHops,omitempty"`
	// TrustedCIDRs are the proxies trusted to append to X-Forwarded-For:
	// read from the right while the addresses are theirs, from a peer
	// that is one of them.
	TrustedCIDRs []string `json:"trustedCIDRs,omitempty"`
}

// CustomHeader is a header a proxy in front sets to the client's address.
type CustomHeader struct {
	Name string `json:"name"`
	// FailClosed refuses (403) a request without a valid address in the
	// header; otherwise it is taken as from its peer.
	FailClosed bool `json:"failClosed,omitempty"`
}

// ProxyProtocol is the PROXY protocol of a listener's port.
type ProxyProtocol struct {
	// Optional serves connections without a header as from their peer.
	Optional bool `json:"optional,omitempty"`
	// TrustedCIDRs are the peers allowed to send a header; unset: any.
	// A header from another peer is refused (the connection closed).
	TrustedCIDRs []string `json:"trustedCIDRs,omitempty"`
}

// targetKinds are the kinds a policy may target: listeners and route
// rules by section.
var targetKinds = []policytarget.Kind{
	{Kind: "Gateway", Group: gwv1.GroupName, Sections: true}, {Kind: "ListenerSet", Group: gwv1.GroupName, Sections: true},
	{Kind: "HTTPRoute", Group: gwv1.GroupName, Sections: true},
}

// Validate checks the rules of the CRD's schema (and its CEL rules) for
// objects that reach translate without an API server. The error names
// the field.
func (s *Spec) Validate() error {
	var errs []string
	add := func(format string, a ...any) { errs = append(errs, fmt.Sprintf(format, a...)) }
	errs = append(errs, policytarget.Problems(s.TargetRefs, MaxTargets, targetKinds, func(at string, ref gwv1.LocalPolicyTargetReferenceWithSectionName) string {
		if ref.Kind == "HTTPRoute" && (s.ClientIPDetection != nil || s.ProxyProtocol != nil || s.TLS != nil || s.HTTP != nil) {
			return at + ".kind: an HTTPRoute may be targeted for rateLimit only"
		}
		return ""
	})...)
	if s.ClientIPDetection == nil && s.ProxyProtocol == nil && s.RateLimit == nil && s.TLS == nil && s.HTTP == nil {
		add("spec: at least one of clientIPDetection, proxyProtocol, rateLimit, tls, http is needed")
	}
	if h := s.HTTP; h != nil {
		errs = append(errs, h.errors()...)
	}
	if ts := s.TLS; ts != nil {
		errs = append(errs, ts.errors()...)
	}
	if rl := s.RateLimit; rl != nil {
		errs = append(errs, rl.errors()...)
	}
	if d := s.ClientIPDetection; d != nil {
		switch {
		case (d.XForwardedFor == nil) == (d.CustomHeader == nil):
			add("spec.clientIPDetection: exactly one of xForwardedFor, customHeader is needed")
		case d.XForwardedFor != nil:
			x := d.XForwardedFor
			switch {
			case (x.NumTrustedHops == nil) == (len(x.TrustedCIDRs) == 0):
				add("spec.clientIPDetection.xForwardedFor: exactly one of numTrustedHops, trustedCIDRs is needed")
			case x.NumTrustedHops != nil && (*x.NumTrustedHops < 1 || *x.NumTrustedHops > MaxTrustedHops):
				add("spec.clientIPDetection.xForwardedFor.numTrustedHops: %d is not between 1 and %d", *x.NumTrustedHops, MaxTrustedHops)
			default:
				errs = append(errs, cidrErrors("spec.clientIPDetection.xForwardedFor.trustedCIDRs", x.TrustedCIDRs)...)
			}
		default:
			if n := d.CustomHeader.Name; n == "" || len(validation.IsHTTPHeaderName(n)) > 0 {
				add("spec.clientIPDetection.customHeader.name: %q is not a header name", n)
			}
		}
	}
	if pp := s.ProxyProtocol; pp != nil {
		errs = append(errs, cidrErrors("spec.proxyProtocol.trustedCIDRs", pp.TrustedCIDRs)...)
	}
	if len(errs) == 0 {
		return nil
	}
	// One line, as a condition's message reads best.
	return errors.New(strings.Join(errs, "; "))
}

func cidrErrors(at string, cidrs []string) []string {
	var errs []string
	if len(cidrs) > MaxCIDRs {
		errs = append(errs, fmt.Sprintf("%s: at most %d, not %d", at, MaxCIDRs, len(cidrs)))
	}
	for i, c := range cidrs {
		if _, err := netip.ParsePrefix(c); err != nil {
			errs = append(errs, fmt.Sprintf("%s[%d]: %q is not a CIDR", at, i, c))
		}
	}
	return errs
}

// prefixes parses valid CIDRs, masked.
func prefixes(cidrs []string) []netip.Prefix {
	out := make([]netip.Prefix, 0, len(cidrs))
	for _, c := range cidrs {
		if p, err := netip.ParsePrefix(c); err == nil {
			out = append(out, p.Masked())
		}
	}
	return out
}

// Config is d as the data plane's configuration says it, for the policy
// named policy ("namespace/name"). d must be valid.
func (d *ClientIPDetection) Config(policy string) *config.ClientAddress {
	out := &config.ClientAddress{Policy: policy}
	if x := d.XForwardedFor; x != nil {
		if x.NumTrustedHops != nil {
			out.XFFTrustedHops = int(*x.NumTrustedHops)
		}
		out.XFFTrustedCIDRs = prefixes(x.TrustedCIDRs)
	}
	if h := d.CustomHeader; h != nil {
		out.Header = textproto.CanonicalMIMEHeaderKey(h.Name)
		out.FailClosed = h.FailClosed
	}
	return out
}

// Config is pp as the data plane's configuration says it, for the policy
// named policy ("namespace/name"). pp must be valid.
func (pp *ProxyProtocol) Config(policy string) *config.ProxyProtocol {
	out := &config.ProxyProtocol{Optional: pp.Optional, Policy: policy}
	if len(pp.TrustedCIDRs) > 0 {
		out.Trusted = prefixes(pp.TrustedCIDRs)
	}
	return out
}

// DeepCopy copies p (jsoncopy.Copy).
func (p *ClientTrafficPolicy) DeepCopy() *ClientTrafficPolicy { return jsoncopy.Copy(p) }

// DeepCopyObject makes ClientTrafficPolicy a runtime.Object.
func (p *ClientTrafficPolicy) DeepCopyObject() runtime.Object { return p.DeepCopy() }

func (rl *RateLimit) errors() []string {
	var errs []string
	add := func(format string, a ...any) { errs = append(errs, fmt.Sprintf(format, a...)) }
	if rl.Requests < 1 || rl.Requests > MaxRequests {
		add("spec.rateLimit.requests: %d is not between 1 and %d", rl.Requests, MaxRequests)
	}
	if _, ok := unitDurations[rl.Unit]; !ok {
		add("spec.rateLimit.unit: %q is not one of Second, Minute, Hour", rl.Unit)
	}
	if rl.Burst != nil && (*rl.Burst < 1 || *rl.Burst > MaxRequests) {
		add("spec.rateLimit.burst: %d is not between 1 and %d", *rl.Burst, MaxRequests)
	}
	if rl.MaxKeys != nil && (*rl.MaxKeys < 1 || *rl.MaxKeys > MaxKeys) {
		add("spec.rateLimit.maxKeys: %d is not between 1 and %d", *rl.MaxKeys, MaxKeys)
	}
	if k := rl.Key; k != nil {
		switch k.Type {
		case config.RateLimitWhole, config.RateLimitByClient:
			if k.Header != nil {
				add("spec.rateLimit.key.header: set only with type Header")
			}
		case config.RateLimitByHeader:
			if k.Header == nil || k.Header.Name == "" || len(validation.IsHTTPHeaderName(k.Header.Name)) > 0 {
				add("spec.rateLimit.key.header.name: type Header needs a header name")
			}
		default:
			add("spec.rateLimit.key.type: %q is not one of Target, ClientAddress, Header", k.Type)
		}
	}
	return errs
}

// Config is rl as the data plane's configuration says it: the buckets
// named id, for the policy named policy. rl must be valid.
func (rl *RateLimit) Config(id, policy string) *config.RateLimit {
	out := &config.RateLimit{ID: id, Requests: rl.Requests, Per: unitDurations[rl.Unit], Burst: rl.Requests,
		Key: config.RateLimitWhole, MaxKeys: config.DefaultRateLimitKeys, Policy: policy}
	if rl.Burst != nil {
		out.Burst = *rl.Burst
	}
	if rl.MaxKeys != nil {
		out.MaxKeys = int(*rl.MaxKeys)
	}
	if k := rl.Key; k != nil {
		out.Key = k.Type
		if k.Header != nil {
			out.Header = textproto.CanonicalMIMEHeaderKey(k.Header.Name)
		}
	}
	return out
}
