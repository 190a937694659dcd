package proxy

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"portico.dev/portico/config"
	"portico.dev/portico/internal/shared/jose"
)

// benchAlg is one signature algorithm's key, its JWK and its signer.
type benchAlg struct {
	name string
	jwk  map[string]any
	sign func([]byte) []byte
}

func benchAlgs(b *testing.B) []benchAlg {
	ec, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	rk, _ := rsa.GenerateKey(rand.Reader, 2048)
	edPub, edPriv, _ := ed25519.GenerateKey(rand.Reader)
	ps256 := func(msg []byte) []byte {
		d := sha256.Sum256(msg)
		sig, err := rsa.SignPSS(rand.Reader, rk, crypto.SHA256, d[:], &rsa.PSSOptions{SaltLength: rsa.PSSSaltLengthEqualsHash})
		if err != nil {
			b.Fatal(err)
		}
		return sig
	}
	return []benchAlg{
		{"RS256", rsaJWK("k", &rk.PublicKey), rs256(rk)},
		{"PS256", rsaJWK("k", &rk.PublicKey), ps256},
		{"ES256", ecJWK("k", &ec.PublicKey), es256(ec)},
		{"EdDSA", map[string]any{"kty": "OKP", "crv": "Ed25519", "kid": "k", "x": b64url(edPub)}, func(m []byte) []byte { return ed25519.Sign(edPriv, m) }},
	}
}

// BenchmarkJWT is the data plane's cost of a JWT-protected request's
// check, in process (no sockets), per algorithm, with the provider's
// keys in hand: "new" is a token never seen before each time (signature
// verified, claims decoded), "repeated" the same token again (taken
// from the cache of verified tokens). The token carries the claims a
// typical issuer puts in one; the policy forwards a claim to a header,
// but for "new-noclaims", whose policy reads no claim beyond those every
// verification reads.
func BenchmarkJWT(b *testing.B) {
	for _, a := range benchAlgs(b) {
		p := localProvider(b, "https://idp.example", a.jwk)
		bare := *p
		p.ClaimToHeaders = []config.ClaimHeader{{Claim: "sub", Header: "X-Sub"}}
		sec := &config.Security{JWT: &config.JWTAuth{Providers: []*config.JWTProvider{p}}}
		secBare := &config.Security{JWT: &config.JWTAuth{Providers: []*config.JWTProvider{&bare}}}
		hdr := map[string]any{"alg": a.name, "kid": "k", "typ": "JWT"}
		const n = 1000
		tokens := make([]string, n)
		for i := range tokens {
			c := idpClaims()
			c["jti"] = fmt.Sprint(i)
			c["aud"] = []string{"api"}
			c["scope"] = "read write"
			c["realm_access"] = map[string]any{"roles": []string{"staff", "user"}}
			tokens[i] = signedToken(b, hdr, c, a.sign)
		}
		for _, mode := range []string{"new", "repeated", "new-noclaims"} {
			b.Run(a.name+"/"+mode, func(b *testing.B) {
				sec := sec
				if mode == "new-noclaims" {
					sec = secBare
				}
				g := newGuard(DefaultOptions(), nil)
				w := httptest.NewRecorder()
				r := httptest.NewRequest(http.MethodGet, "/", nil)
				i := 0
				b.ReportAllocs()
				start := processCPU(b)
				for b.Loop() {
					tok := tokens[0]
					if mode != "repeated" {
						if i%n == 0 {
							g.tokens.reset() // every token verified anew
						}
						tok = tokens[i%n]
						i++
					}
					r.Header = http.Header{"Authorization": {"Bearer " + tok}}
					if !g.check(w, r, sec, config.EndpointTable{}) {
						b.Fatalf("refused: %d", w.Code)
					}
				}
				// The process's CPU time, which other processes' load on the
				// machine does not inflate as it does ns/op.
				b.ReportMetric(float64(processCPU(b)-start)/float64(b.N), "cpu-ns/op")
			})
		}
	}
}

// BenchmarkJWTSignature is the floor under BenchmarkJWT's "new": the
// signature check alone, of a token already split and decoded (its
// SHA-256 and the standard library's verification); "ES256-stdlib" is
// ecdsa.VerifyASN1 of a digest alone, what no code around it can lower.
func BenchmarkJWTSignature(b *testing.B) {
	b.Run("ES256-stdlib", func(b *testing.B) {
		k, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		digest := sha256.Sum256([]byte("header.payload"))
		sig, err := ecdsa.SignASN1(rand.Reader, k, digest[:])
		if err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		start := processCPU(b)
		for b.Loop() {
			if !ecdsa.VerifyASN1(&k.PublicKey, digest[:], sig) {
				b.Fatal("does not verify")
			}
		}
		b.ReportMetric(float64(processCPU(b)-start)/float64(b.N), "cpu-ns/op")
	})
	for _, a := range benchAlgs(b) {
		set, err := jose.ParseKeySet(jwksJSON(a.jwk))
		if err != nil {
			b.Fatal(err)
		}
		t, err := jose.Parse(signedToken(b, map[string]any{"alg": a.name, "kid": "k"}, idpClaims(), a.sign))
		if err != nil {
			b.Fatal(err)
		}
		b.Run(a.name, func(b *testing.B) {
			b.ReportAllocs()
			start := processCPU(b)
			for b.Loop() {
				if err := t.Verify(set); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(processCPU(b)-start)/float64(b.N), "cpu-ns/op")
		})
	}
}
