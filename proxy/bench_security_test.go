package proxy

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"golang.org/x/crypto/bcrypt"

	"portico.dev/portico/config"
)

// BenchmarkSecurityCheck is the data plane's cost of each mechanism per
// request, in process (no sockets): the check a rule's Security makes
// before the request is forwarded. basic-cached is a credential verified
// before (bcrypt's cost is paid once); jwt-es256-cached-key verifies a
// new token's signature with a key in hand, jwt-seen-token a token
// verified before.
func BenchmarkSecurityCheck(b *testing.B) {
	k, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	p := localProvider(b, "https://idp.example", ecJWK("k", &k.PublicKey))
	jwtAuth := &config.JWTAuth{Providers: []*config.JWTProvider{p}}
	tok := signedToken(b, map[string]any{"alg": "ES256", "kid": "k"}, idpClaims(), es256(k))
	cases := []struct {
		name   string
		sec    *config.Security
		header [2]string
		fresh  func(i int) string // a new token per request, when set
	}{
		{"address", &config.Security{Addresses: &config.AddressList{Allow: mustPrefixes(&testing.T{}, "10.0.0.0/8", "192.0.2.0/24")}}, [2]string{}, nil},
		{"api-key", &config.Security{APIKey: config.NewAPIKeyAuth("X-Api-Key", "", nil, map[string]string{"the-key": "ci"})}, [2]string{"X-Api-Key", "the-key"}, nil},
		{"basic-cached", &config.Security{Basic: config.NewBasicAuth("r", "s", map[string]string{"alice": bcryptHash(b, "pw", bcrypt.DefaultCost)})}, basicHeader("alice", "pw"), nil},
		{"jwt-seen-token", &config.Security{JWT: jwtAuth}, bearer(tok), nil},
		{"jwt-es256-cached-key", &config.Security{JWT: jwtAuth}, [2]string{}, func(i int) string {
			c := idpClaims()
			c["jti"] = fmt.Sprint(i)
			return signedToken(b, map[string]any{"alg": "ES256", "kid": "k"}, c, es256(k))
		}},
	}
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			g := newGuard(DefaultOptions(), nil)
			var tokens []string
			if tc.fresh != nil {
				for i := range 2000 {
					tokens = append(tokens, tc.fresh(i))
				}
			}
			w := httptest.NewRecorder()
			r := httptest.NewRequest(http.MethodGet, "/", nil)
			r.RemoteAddr = "192.0.2.7:4000"
			if tc.header[0] != "" {
				// The first verification (a bcrypt's) is not a request's
				// cost once the credential is cached.
				r.Header = http.Header{tc.header[0]: {tc.header[1]}}
				g.check(w, r, tc.sec, config.EndpointTable{})
			}
			i := 0
			b.ReportAllocs()
			for b.Loop() {
				h := http.Header{}
				if tc.header[0] != "" {
					h[tc.header[0]] = []string{tc.header[1]}
				}
				if tokens != nil {
					h["Authorization"] = []string{"Bearer " + tokens[i%len(tokens)]}
					if i%len(tokens) == 0 {
						g.tokens.reset() // every token verified anew
					}
					i++
				}
				r.Header = h
				if !g.check(w, r, tc.sec, config.EndpointTable{}) {
					b.Fatalf("refused: %d", w.Code)
				}
			}
		})
	}
}
