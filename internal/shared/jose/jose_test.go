package jose

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/asn1"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"testing"
	"time"
)

func enc(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }

func token(t testing.TB, hdr map[string]any, sign func([]byte) []byte) string {
	t.Helper()
	h, _ := json.Marshal(hdr)
	c, _ := json.Marshal(map[string]any{"iss": "i", "exp": time.Now().Add(time.Hour).Unix()})
	s := enc(h) + "." + enc(c)
	return s + "." + enc(sign([]byte(s)))
}

func ecSigner(k *ecdsa.PrivateKey, h crypto.Hash) func([]byte) []byte {
	return func(m []byte) []byte {
		d := h.New()
		d.Write(m)
		r, s, _ := ecdsa.Sign(rand.Reader, k, d.Sum(nil))
		size := (k.Curve.Params().BitSize + 7) / 8
		out := make([]byte, 2*size)
		r.FillBytes(out[:size])
		s.FillBytes(out[size:])
		return out
	}
}

func set(t testing.TB, keys ...map[string]any) *KeySet {
	t.Helper()
	b, _ := json.Marshal(map[string]any{"keys": keys})
	s, err := ParseKeySet(b)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func ecKey(kid, crv string, k *ecdsa.PublicKey) map[string]any {
	size := (k.Curve.Params().BitSize + 7) / 8
	x, y := make([]byte, size), make([]byte, size)
	k.X.FillBytes(x)
	k.Y.FillBytes(y)
	return map[string]any{"kty": "EC", "crv": crv, "kid": kid, "x": enc(x), "y": enc(y)}
}

// TestVerifyEveryAlgorithm: a token of each accepted algorithm verifies
// with its key, and not with another key of the same kind.
func TestVerifyEveryAlgorithm(t *testing.T) {
	rk, _ := rsa.GenerateKey(rand.Reader, 2048)
	rsaJWK := map[string]any{"kty": "RSA", "kid": "r", "n": enc(rk.N.Bytes()), "e": enc(big.NewInt(int64(rk.E)).Bytes())}
	_, edPriv, _ := ed25519.GenerateKey(rand.Reader)
	edJWK := map[string]any{"kty": "OKP", "crv": "Ed25519", "kid": "ed", "x": enc(edPriv.Public().(ed25519.PublicKey))}
	keys := []map[string]any{rsaJWK, edJWK}
	signers := map[string]func([]byte) []byte{}
	for _, c := range []struct {
		alg, crv string
		curve    elliptic.Curve
		h        crypto.Hash
	}{{"ES256", "P-256", elliptic.P256(), crypto.SHA256}, {"ES384", "P-384", elliptic.P384(), crypto.SHA384}, {"ES512", "P-521", elliptic.P521(), crypto.SHA512}} {
		k, _ := ecdsa.GenerateKey(c.curve, rand.Reader)
		keys = append(keys, ecKey(c.alg, c.crv, &k.PublicKey))
		signers[c.alg] = ecSigner(k, c.h)
	}
	for alg, h := range map[string]crypto.Hash{"RS256": crypto.SHA256, "RS384": crypto.SHA384, "RS512": crypto.SHA512} {
		signers[alg] = func(m []byte) []byte {
			d := h.New()
			d.Write(m)
			s, _ := rsa.SignPKCS1v15(rand.Reader, rk, h, d.Sum(nil))
			return s
		}
	}
	for alg, h := range map[string]crypto.Hash{"PS256": crypto.SHA256, "PS384": crypto.SHA384, "PS512": crypto.SHA512} {
		signers[alg] = func(m []byte) []byte {
			d := h.New()
			d.Write(m)
			s, _ := rsa.SignPSS(rand.Reader, rk, h, d.Sum(nil), &rsa.PSSOptions{SaltLength: rsa.PSSSaltLengthEqualsHash})
			return s
		}
	}
	signers["EdDSA"] = func(m []byte) []byte { return ed25519.Sign(edPriv, m) }
	ks := set(t, keys...)
	for alg, sign := range signers {
		kid := alg
		switch alg[:2] {
		case "RS", "PS":
			kid = "r"
		case "Ed":
			kid = "ed"
		}
		tok, err := Parse(token(t, map[string]any{"alg": alg, "kid": kid}, sign))
		if err != nil {
			t.Fatal(err)
		}
		if err := tok.Verify(ks); err != nil {
			t.Errorf("%s: %v", alg, err)
		}
		tok.sig[len(tok.sig)/2] ^= 1
		if err := tok.Verify(ks); !errors.Is(err, ErrBadSignature) {
			t.Errorf("%s with a flipped bit: %v", alg, err)
		}
	}
	_ = sha256.New
	_ = sha512.New
}

// TestRefused: "none", the HMAC algorithms, unknown ones and a critical
// header extension are refused whatever the signature; keys too weak or
// private, and sets with no usable key, are not taken.
func TestRefused(t *testing.T) {
	k, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	ks := set(t, ecKey("k", "P-256", &k.PublicKey))
	for _, alg := range []string{"none", "None", "HS256", "HS512", "ES256K", ""} {
		tok, err := Parse(token(t, map[string]any{"alg": alg, "kid": "k"}, ecSigner(k, crypto.SHA256)))
		if err != nil {
			continue
		}
		if err := tok.Verify(ks); !errors.Is(err, ErrAlgorithm) {
			t.Errorf("alg %q: %v", alg, err)
		}
	}
	if _, err := Parse(token(t, map[string]any{"alg": "ES256", "crit": []string{"exp"}}, ecSigner(k, crypto.SHA256))); err == nil {
		t.Error("a critical extension was accepted")
	}
	small, _ := rsa.GenerateKey(rand.Reader, 1024)
	for name, keys := range map[string][]map[string]any{
		"small RSA": {{"kty": "RSA", "n": enc(small.N.Bytes()), "e": "AQAB"}},
		"oct":       {{"kty": "oct", "k": "c2VjcmV0"}},
		"enc":       {{"kty": "EC", "crv": "P-256", "use": "enc", "x": ecKey("", "P-256", &k.PublicKey)["x"], "y": ecKey("", "P-256", &k.PublicKey)["y"]}},
		"off curve": {{"kty": "EC", "crv": "P-256", "x": enc(make([]byte, 32)), "y": enc(make([]byte, 32))}},
	} {
		b, _ := json.Marshal(map[string]any{"keys": keys})
		if _, err := ParseKeySet(b); err == nil {
			t.Errorf("%s: a set was made", name)
		}
	}
	priv := ecKey("k", "P-256", &k.PublicKey)
	priv["d"] = enc(k.D.Bytes())
	b, _ := json.Marshal(map[string]any{"keys": []any{priv}})
	if _, err := ParseKeySet(b); err == nil {
		t.Error("a set with a private key was taken")
	}
}

// TestCheckClaims: exp is required and checked with the skew, as nbf;
// iss must be the provider's; aud must hold one of the audiences.
func TestCheckClaims(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	e := Expect{Issuer: "i", Audiences: []string{"a", "b"}, Now: now, Skew: 30 * time.Second}
	for _, tc := range []struct {
		claims string
		want   error
	}{
		{`{"iss":"i","aud":"a","exp":1800000060}`, nil},
		{`{"iss":"i","aud":["x","b"],"exp":1800000060,"nbf":1800000020}`, nil},
		{`{"iss":"i","aud":"a","exp":1799999980}`, nil},
		{`{"iss":"i","aud":"a","exp":1799999960}`, ErrExpired},
		{`{"iss":"i","aud":"a"}`, ErrNoExpiry},
		{`{"iss":"i","aud":"a","exp":"soon"}`, ErrNoExpiry},
		{`{"iss":"i","aud":"a","exp":1800000060,"nbf":1800000100}`, ErrNotYet},
		{`{"iss":"j","aud":"a","exp":1800000060}`, ErrIssuer},
		{`{"iss":"i","aud":"c","exp":1800000060}`, ErrAudience},
		{`{"iss":"i","exp":1800000060}`, ErrAudience},
	} {
		c, err := ParseClaims([]byte(tc.claims))
		if err != nil {
			t.Fatal(err)
		}
		if err := c.CheckClaims(e); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.claims, err, tc.want)
		}
	}
}

// BenchmarkVerifyES256 is the cost of verifying one ES256 token whose key
// is in hand (parsed set): parse, signature, claims.
func BenchmarkVerifyES256(b *testing.B) {
	k, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	ks := set(b, ecKey("k", "P-256", &k.PublicKey))
	s := token(b, map[string]any{"alg": "ES256", "kid": "k"}, ecSigner(k, crypto.SHA256))
	e := Expect{Issuer: "i", Now: time.Now()}
	b.ReportAllocs()
	for b.Loop() {
		tok, err := Parse(s)
		if err != nil {
			b.Fatal(err)
		}
		if err := tok.Verify(ks); err != nil {
			b.Fatal(err)
		}
		c, err := ParseClaims(tok.Payload)
		if err != nil || c.CheckClaims(e) != nil {
			b.Fatal(err)
		}
	}
}

// TestClaimPaths: a dotted path reads nested objects, an escaped dot is
// part of a name, and the typed rules of Matches and Text hold.
func TestClaimPaths(t *testing.T) {
	c, err := ParseClaims([]byte(`{"realm_access": {"roles": ["staff", "user"]}, "https://example.com/tenant": "acme",
		"a": {"b.c": 7}, "n": 1700000000, "f": 1.5, "ok": true, "obj": {"x": 1}, "mixed": [1, "two", false], "deep": [[1]]}`))
	if err != nil {
		t.Fatal(err)
	}
	look := func(path string) any {
		t.Helper()
		p, err := ParseClaimPath(path)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		v, _ := c.Lookup(p)
		return v
	}
	if v, _ := Text(look("realm_access.roles")); v != "staff,user" {
		t.Errorf("realm_access.roles: %q", v)
	}
	if v := look(`https://example\.com/tenant`); v != "acme" {
		t.Errorf("escaped dots: %v", v)
	}
	if v := look(`a.b\.c`); v != float64(7) {
		t.Errorf(`a.b\.c: %v`, v)
	}
	if v := look("https://example.com/tenant"); v != nil {
		t.Errorf("unescaped dots read %v", v)
	}
	if v := look("realm_access.roles.x"); v != nil {
		t.Errorf("a path through an array read %v", v)
	}
	for _, bad := range []string{"", ".", "a.", ".a", "a..b", `a\`, `a\b`} {
		if _, err := ParseClaimPath(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
	for _, tc := range []struct {
		path, want string
		match      bool
	}{
		{"realm_access.roles", "user", true}, {"realm_access.roles", "admin", false},
		{"n", "1700000000", true}, {"n", "1.7e9", true}, {"n", "1700000001", false}, {"n", "abc", false},
		{"f", "1.5", true}, {"ok", "true", true}, {"ok", "false", false}, {"ok", "1", false},
		{"obj", `{"x":1}`, false}, {"mixed", "1", true}, {"mixed", "two", true}, {"mixed", "false", true},
		{"deep", "1", false}, {`https://example\.com/tenant`, "acme", true},
	} {
		if got := Matches(look(tc.path), tc.want); got != tc.match {
			t.Errorf("Matches(%s, %q) = %v", tc.path, tc.want, got)
		}
	}
	for path, want := range map[string]string{"n": "1700000000", "f": "1.5", "ok": "true", "mixed": "1,two,false"} {
		if got, ok := Text(look(path)); !ok || got != want {
			t.Errorf("Text(%s) = %q, %v; want %q", path, got, ok, want)
		}
	}
	for _, path := range []string{"obj", "deep"} {
		if got, ok := Text(look(path)); ok {
			t.Errorf("Text(%s) = %q, want none", path, got)
		}
	}
}

// TestKeySetFingerprint: the same keys give the same fingerprint
// whatever the JSON around them; a key removed or added changes it.
func TestKeySetFingerprint(t *testing.T) {
	k1, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	k2, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	a := set(t, ecKey("1", "P-256", &k1.PublicKey), ecKey("2", "P-256", &k2.PublicKey))
	withOct := set(t, ecKey("1", "P-256", &k1.PublicKey), map[string]any{"kty": "oct", "k": "c2VjcmV0"}, ecKey("2", "P-256", &k2.PublicKey))
	one := set(t, ecKey("1", "P-256", &k1.PublicKey))
	renamed := set(t, ecKey("1", "P-256", &k1.PublicKey), ecKey("3", "P-256", &k2.PublicKey))
	if a.Fingerprint != withOct.Fingerprint {
		t.Error("an unusable key changed the fingerprint")
	}
	if a.Fingerprint == one.Fingerprint || a.Fingerprint == renamed.Fingerprint {
		t.Error("a removed or renamed key kept the fingerprint")
	}
}

// TestParseClaimsStrict: a claim given twice, or a payload that is not a
// UTF-8 JSON object, is malformed for both decoders; ParseRegistered
// reads what ParseClaims reads of the registered claims.
func TestParseClaimsStrict(t *testing.T) {
	for _, bad := range []string{`{"sub": "a", "sub": "b"}`, `{"iss": "a", "iss": "b"}`, "{\"sub\": \"\xff\"}", `null`, `[]`, `{"exp": 1}x`} {
		if _, err := ParseClaims([]byte(bad)); err == nil {
			t.Errorf("ParseClaims(%q): no error", bad)
		}
		if _, err := ParseRegistered([]byte(bad)); err == nil && bad != `null` {
			t.Errorf("ParseRegistered(%q): no error", bad)
		}
	}
	payload := []byte(`{"iss": "i", "exp": 2000000000, "nbf": 1, "aud": ["a", "b"], "sub": "s", "x": {"y": [1, 2]}}`)
	all, err1 := ParseClaims(payload)
	reg, err2 := ParseRegistered(payload)
	if err1 != nil || err2 != nil {
		t.Fatal(err1, err2)
	}
	for _, name := range []string{"iss", "exp", "nbf", "aud"} {
		if fmt.Sprint(all[name]) != fmt.Sprint(reg[name]) {
			t.Errorf("%s: %v and %v", name, all[name], reg[name])
		}
	}
	if len(reg) != 4 {
		t.Errorf("ParseRegistered read %v", reg)
	}
}

// TestECDSADER: the DER of r and s reads back as the same integers, for
// values with leading zeros, with the high bit set, and of P-521's size
// (a long-form length).
func TestECDSADER(t *testing.T) {
	for _, size := range []int{32, 48, 66} {
		for i := range 200 {
			r, s := make([]byte, size), make([]byte, size)
			rand.Read(r)
			rand.Read(s)
			switch i % 4 {
			case 1:
				r[0], r[1] = 0, 0
			case 2:
				r[0], s[0] = 0xff, 0x80
			case 3:
				clear(s[:size-1])
			}
			var got struct{ R, S *big.Int }
			rest, err := asn1.Unmarshal(ecdsaDER(r, s), &got)
			if err != nil || len(rest) != 0 {
				t.Fatalf("size %d: %v (rest %d)", size, err, len(rest))
			}
			if got.R.Cmp(new(big.Int).SetBytes(r)) != 0 || got.S.Cmp(new(big.Int).SetBytes(s)) != 0 {
				t.Fatalf("size %d: read back %x %x, want %x %x", size, got.R, got.S, r, s)
			}
		}
	}
}
