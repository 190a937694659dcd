package clientpolicy

import (
	"crypto/tls"
	"net/netip"
	"strings"
	"testing"

	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"
)

func spec(t *testing.T, y string) Spec {
	t.Helper()
	var s Spec
	if err := yaml.UnmarshalStrict([]byte(y), &s); err != nil {
		t.Fatal(err)
	}
	return s
}

// TestValidate: the rules the CRD states (its schema and CEL rules) are
// refused here too, naming the field, for policies read from files.
func TestValidate(t *testing.T) {
	const gw = "targetRefs: [{group: gateway.networking.k8s.io, kind: Gateway, name: gw}]\n"
	for y, want := range map[string]string{
		gw + "clientIPDetection: {xForwardedFor: {numTrustedHops: 1}}":                      "",
		gw + "clientIPDetection: {xForwardedFor: {trustedCIDRs: [10.0.0.0/8, 'fd00::/8']}}": "",
		gw + "clientIPDetection: {customHeader: {name: X-Real-IP, failClosed: true}}":       "",
		gw + "proxyProtocol: {}": "",
		gw:                       "at least one of clientIPDetection, proxyProtocol, rateLimit, tls, http",
		gw + "http: {maxHeaderBytes: 4096, maxHeaderCount: 32, requestTimeout: 10s}": "",
		gw + "http: {maxHeaderBytes: 10}":                                            "maxHeaderBytes: 10 is not between 64",
		gw + "http: {http2: {maxConcurrentStreams: 100, idleTimeout: 30s}}":          "",
		gw + "http: {http2: {maxConcurrentStreams: 0}}":                              "maxConcurrentStreams: 0 is not between 1",
		gw + "http: {http2: {idleTimeout: 10ms}}":                                    "idleTimeout: \"10ms\" is not a duration between 1s",
		gw + "http: {http1: {idleTimeout: 30s, headerTimeout: 500ms}}":               "",
		gw + "http: {http1: {}}":                                                     "http1: at least one of idleTimeout, headerTimeout",
		gw + "http: {http1: {idleTimeout: 500ms}}":                                   "http1.idleTimeout: \"500ms\" is not a duration between 1s and 24h",
		gw + "http: {http1: {headerTimeout: 10ms}}":                                  "http1.headerTimeout: \"10ms\" is not a duration between 100ms and 1h",
		gw + "http: {http1: {headerTimeout: 2h}}":                                    "http1.headerTimeout: \"2h\" is not a duration between 100ms and 1h",
		gw + "http: {maxHeaderCount: 0}":                                             "maxHeaderCount: 0 is not between 1",
		gw + "http: {requestTimeout: 2d}":                                            "requestTimeout: \"2d\" is not a duration",
		gw + "tls: {minVersion: '1.2', maxVersion: '1.2', ciphers: [TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256], alpnProtocols: [http/1.1], disableSessionTickets: true}": "",
		gw + "tls: {minVersion: '1.3', maxVersion: '1.2'}":                                "minVersion 1.3 is above maxVersion 1.2",
		gw + "tls: {minVersion: '1.0'}":                                                   "minVersion: \"1.0\" is not one of 1.2, 1.3",
		gw + "tls: {minVersion: '1.3', ciphers: [TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256]}": "TLS 1.3's suites are not configurable",
		gw + "tls: {ciphers: [TLS_RSA_WITH_RC4_128_SHA]}":                                 "is not a secure TLS 1.2 cipher suite",
		gw + "tls: {alpnProtocols: [h2, h3]}":                                             "\"h3\" is not one of h2, http/1.1",
		gw + "tls: {alpnProtocols: [h2, h2]}":                                             "listed twice",
		gw + "rateLimit: {requests: 10, unit: Second}":                                    "",
		gw + "rateLimit: {requests: 10, unit: Minute, burst: 20, key: {type: Header, header: {name: x-api-key}}, maxKeys: 10}": "",
		gw + "rateLimit: {requests: 0, unit: Second}":                                                                                           "requests: 0 is not between 1",
		gw + "rateLimit: {requests: 1, unit: Day}":                                                                                              "unit: \"Day\" is not one of",
		gw + "rateLimit: {requests: 1, unit: Second, burst: 0}":                                                                                 "burst: 0 is not between 1",
		gw + "rateLimit: {requests: 1, unit: Second, maxKeys: 2000000}":                                                                         "maxKeys: 2000000 is not between 1",
		gw + "rateLimit: {requests: 1, unit: Second, key: {type: Header}}":                                                                      "type Header needs a header name",
		gw + "rateLimit: {requests: 1, unit: Second, key: {type: Target, header: {name: a}}}":                                                   "set only with type Header",
		gw + "rateLimit: {requests: 1, unit: Second, key: {type: Cookie}}":                                                                      "not one of Target, ClientAddress, Header",
		"targetRefs: [{group: gateway.networking.k8s.io, kind: HTTPRoute, name: web, sectionName: v2}]\nrateLimit: {requests: 1, unit: Second}": "",
		"targetRefs: [{group: gateway.networking.k8s.io, kind: HTTPRoute, name: web}]\nproxyProtocol: {}":                                       "for rateLimit only",
		gw + "clientIPDetection: {}":                                                                                                            "exactly one of xForwardedFor, customHeader",
		gw + "clientIPDetection: {xForwardedFor: {numTrustedHops: 1}, customHeader: {name: a}}":                                                 "exactly one of xForwardedFor, customHeader",
		gw + "clientIPDetection: {xForwardedFor: {numTrustedHops: 1, trustedCIDRs: [1.0.0.0/8]}}":                                               "exactly one of numTrustedHops, trustedCIDRs",
		gw + "clientIPDetection: {xForwardedFor: {numTrustedHops: 0}}":                                                                          "numTrustedHops: 0 is not between 1 and 32",
		gw + "clientIPDetection: {xForwardedFor: {trustedCIDRs: [10.0.0.300/8]}}":                                                               "trustedCIDRs[0]: \"10.0.0.300/8\" is not a CIDR",
		gw + "clientIPDetection: {customHeader: {name: 'bad header'}}":                                                                          "customHeader.name",
		gw + "proxyProtocol: {trustedCIDRs: [nope]}":                                                                                            "proxyProtocol.trustedCIDRs[0]",
		"targetRefs: [{group: '', kind: Service, name: web}]\nproxyProtocol: {}":                                                                "kind: \"Service\" is not one of Gateway, ListenerSet, HTTPRoute",
		"targetRefs: [{group: example.com, kind: Gateway, name: gw}]\nproxyProtocol: {}":                                                        "group: Gateway is of group",
		"targetRefs: []\nproxyProtocol: {}":                                                                                                     "between 1 and 16 targets",
	} {
		s := spec(t, y)
		err := s.Validate()
		switch {
		case want == "" && err != nil:
			t.Errorf("%s: refused: %v", y, err)
		case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
			t.Errorf("%s: %v, want an error saying %q", y, err, want)
		}
	}
}

// TestRateLimitConfig: defaults (burst of requests, the whole target,
// 100,000 keys) and the unit as a duration.
func TestRateLimitConfig(t *testing.T) {
	rl := &RateLimit{Requests: 5, Unit: Minute}
	if c := rl.Config("id", "ns/p"); c.ID != "id" || c.Burst != 5 || c.Per.Minutes() != 1 || c.Key != "Target" || c.MaxKeys != 100000 {
		t.Errorf("defaults: %+v", c)
	}
	rl = &RateLimit{Requests: 5, Unit: Hour, Burst: ptr.To[int64](9), Key: &RateLimitKey{Type: "Header", Header: &HeaderName{Name: "x-api-key"}}, MaxKeys: ptr.To[int32](7)}
	if c := rl.Config("id", ""); c.Burst != 9 || c.Per.Hours() != 1 || c.Header != "X-Api-Key" || c.MaxKeys != 7 {
		t.Errorf("set: %+v", c)
	}
}

// TestTLSConfig: versions and suites as crypto/tls numbers them.
func TestTLSConfig(t *testing.T) {
	ts := &TLSSettings{MinVersion: "1.2", MaxVersion: "1.3", Ciphers: []string{"TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256"}, ALPNProtocols: []string{"http/1.1"}, DisableSessionTickets: true}
	c := ts.Config()
	if c.MinVersion != tls.VersionTLS12 || c.MaxVersion != tls.VersionTLS13 || len(c.CipherSuites) != 1 ||
		c.CipherSuites[0] != tls.TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256 || c.NextProtos[0] != "http/1.1" || !c.SessionTicketsDisabled {
		t.Errorf("%+v", c)
	}
	if c := (&TLSSettings{}).Config(); c.MinVersion != 0 || c.MaxVersion != 0 || c.CipherSuites != nil || c.NextProtos != nil {
		t.Errorf("unset fields must keep the port's: %+v", c)
	}
}

// TestConfig: the data plane's fields, canonical header name, masked CIDRs.
func TestConfig(t *testing.T) {
	d := &ClientIPDetection{CustomHeader: &CustomHeader{Name: "x-real-ip", FailClosed: true}}
	if c := d.Config("ns/p"); c.Header != "X-Real-Ip" || !c.FailClosed || c.Policy != "ns/p" {
		t.Errorf("custom header: %+v", c)
	}
	d = &ClientIPDetection{XForwardedFor: &XForwardedFor{NumTrustedHops: ptr.To[int32](2)}}
	if c := d.Config(""); c.XFFTrustedHops != 2 || len(c.XFFTrustedCIDRs) != 0 {
		t.Errorf("hops: %+v", c)
	}
	pp := &ProxyProtocol{Optional: true, TrustedCIDRs: []string{"10.1.2.3/8"}}
	if c := pp.Config("ns/p"); !c.Optional || len(c.Trusted) != 1 || c.Trusted[0] != netip.MustParsePrefix("10.0.0.0/8") {
		t.Errorf("proxy protocol: %+v", c)
	}
	if c := (&ProxyProtocol{}).Config(""); c.Trusted != nil || !c.TrustsPeer(netip.MustParseAddr("192.0.2.1")) {
		t.Errorf("without CIDRs every peer is trusted: %+v", c)
	}
}
