// Package jose verifies JSON Web Tokens signed with public keys (JWS
// compact serialization, RFC 7515/7519) against JSON Web Key Sets (RFC
// 7517): RS256/384/512, PS256/384/512, ES256/384/512 and EdDSA only. The
// algorithm a token names must be one of those and match the kind and
// curve of the key it is checked with, so "none" and the HMAC algorithms
// (a token "signed" with a public key as a shared secret) are refused.
// It checks signatures only; claims are the caller's.
package jose

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/sha256"
	_ "crypto/sha512" // the hashes of the algorithms
	"crypto/x509"
	"encoding/base64"
	"encoding/json/jsontext"
	"encoding/json/v2"
	"errors"
	"fmt"
	"math/big"
	"strings"
)

// MaxToken bounds the size of a token read at all.
const MaxToken = 16 << 10

// minRSABits is the smallest RSA key taken (RFC 7518 asks for 2048).
const minRSABits = 2048

// Key is one public key of a set.
type Key struct {
	ID  string
	Alg string // "" when the set does not pin one
	pub crypto.PublicKey
}

// KeySet is a parsed JSON Web Key Set: its usable signing keys.
type KeySet struct {
	Keys []Key
	// Fingerprint is a digest of the keys (their IDs, algorithms and
	// public keys): two sets of the same keys have the same one, so a
	// cache of tokens verified with a set can tell a set fetched again
	// unchanged from a rotation.
	Fingerprint [16]byte
}

type jwk struct {
	Kty string `json:"kty"`
	Kid string `json:"kid"`
	Use string `json:"use"`
	Alg string `json:"alg"`
	Crv string `json:"crv"`
	N   string `json:"n"`
	E   string `json:"e"`
	X   string `json:"x"`
	Y   string `json:"y"`
	D   string `json:"d"`
}

// ParseKeySet reads a JWKS. Keys that are not signing keys of a kind this
// package verifies (encryption keys, symmetric "oct" keys, unknown
// curves, RSA under 2048 bits) are skipped; a set with a private key, or
// with no usable key, is an error.
func ParseKeySet(data []byte) (*KeySet, error) {
	var raw struct {
		Keys []jwk `json:"keys"`
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, fmt.Errorf("JWKS: %w", err)
	}
	set := &KeySet{}
	fp := sha256.New()
	for i, k := range raw.Keys {
		if k.D != "" {
			return nil, fmt.Errorf("JWKS key %d holds a private key", i)
		}
		if k.Use != "" && k.Use != "sig" {
			continue
		}
		pub, err := k.public()
		if err != nil || pub == nil {
			continue
		}
		set.Keys = append(set.Keys, Key{ID: k.Kid, Alg: k.Alg, pub: pub})
		der, err := x509.MarshalPKIXPublicKey(pub)
		if err != nil {
			continue
		}
		fmt.Fprintf(fp, "%q %q %x\n", k.Kid, k.Alg, der)
	}
	copy(set.Fingerprint[:], fp.Sum(nil))
	if len(set.Keys) == 0 {
		return nil, errors.New("JWKS has no usable signing key (RSA of 2048 bits or more, EC P-256/384/521, Ed25519)")
	}
	return set, nil
}

func b64(s string) ([]byte, error) {
	return base64.RawURLEncoding.DecodeString(strings.TrimRight(s, "="))
}

func (k *jwk) public() (crypto.PublicKey, error) {
	switch k.Kty {
	case "RSA":
		n, err1 := b64(k.N)
		e, err2 := b64(k.E)
		if err1 != nil || err2 != nil || len(e) == 0 || len(e) > 4 {
			return nil, errors.New("bad RSA key")
		}
		pub := &rsa.PublicKey{N: new(big.Int).SetBytes(n), E: int(new(big.Int).SetBytes(e).Int64())}
		if pub.N.BitLen() < minRSABits || pub.E < 3 || pub.E%2 == 0 {
			return nil, errors.New("weak RSA key")
		}
		return pub, nil
	case "EC":
		var c elliptic.Curve
		switch k.Crv {
		case "P-256":
			c = elliptic.P256()
		case "P-384":
			c = elliptic.P384()
		case "P-521":
			c = elliptic.P521()
		default:
			return nil, nil
		}
		x, err1 := b64(k.X)
		y, err2 := b64(k.Y)
		size := (c.Params().BitSize + 7) / 8
		if err1 != nil || err2 != nil || len(x) != size || len(y) != size {
			return nil, errors.New("bad EC key")
		}
		// Through the uncompressed encoding, which checks the point is
		// on the curve.
		enc := append(append([]byte{4}, x...), y...)
		pub, err := ecdsa.ParseUncompressedPublicKey(c, enc)
		if err != nil {
			return nil, err
		}
		return pub, nil
	case "OKP":
		if k.Crv != "Ed25519" {
			return nil, nil
		}
		x, err := b64(k.X)
		if err != nil || len(x) != ed25519.PublicKeySize {
			return nil, errors.New("bad Ed25519 key")
		}
		return ed25519.PublicKey(x), nil
	}
	return nil, nil
}

// Header is what a token's protected header says.
type Header struct {
	Alg string `json:"alg"`
	Kid string `json:"kid"`
	Typ string `json:"typ"`
}

// Token is a token split and decoded, not yet verified.
type Token struct {
	Header  Header
	Payload []byte // the claims, JSON
	signed  string // header.payload, as sent
	sig     []byte
}

// Errors of Parse and Verify.
var (
	ErrMalformed    = errors.New("token is malformed")
	ErrAlgorithm    = errors.New("token's algorithm is not accepted")
	ErrUnknownKey   = errors.New("no key of the set matches the token")
	ErrBadSignature = errors.New("token's signature does not verify")
)

// Parse splits and decodes a compact JWS without verifying it.
func Parse(s string) (*Token, error) {
	if len(s) > MaxToken {
		return nil, ErrMalformed
	}
	h, rest, ok1 := strings.Cut(s, ".")
	p, sig, ok2 := strings.Cut(rest, ".")
	if !ok1 || !ok2 || strings.Contains(sig, ".") {
		return nil, ErrMalformed
	}
	hb, err1 := base64.RawURLEncoding.DecodeString(h)
	pb, err2 := base64.RawURLEncoding.DecodeString(p)
	sb, err3 := base64.RawURLEncoding.DecodeString(sig)
	if err1 != nil || err2 != nil || err3 != nil {
		return nil, ErrMalformed
	}
	t := &Token{Payload: pb, signed: s[:len(h)+1+len(p)], sig: sb}
	// One pass over the header: crit alongside the fields read.
	var hdr struct {
		Header
		Crit jsontext.Value `json:"crit"`
	}
	if err := json.Unmarshal(hb, &hdr); err != nil {
		return nil, ErrMalformed
	}
	// A critical extension this package does not know must refuse the
	// token (RFC 7515 4.1.11): it knows none.
	if len(hdr.Crit) > 0 {
		return nil, ErrMalformed
	}
	t.Header = hdr.Header
	return t, nil
}

// algorithm is what one accepted "alg" needs.
type algorithm struct {
	hash  crypto.Hash
	kind  string // "RSA", "PSS", "EC", "Ed"
	curve elliptic.Curve
}

var algorithms = map[string]algorithm{
	"RS256": {crypto.SHA256, "RSA", nil}, "RS384": {crypto.SHA384, "RSA", nil}, "RS512": {crypto.SHA512, "RSA", nil},
	"PS256": {crypto.SHA256, "PSS", nil}, "PS384": {crypto.SHA384, "PSS", nil}, "PS512": {crypto.SHA512, "PSS", nil},
	"ES256": {crypto.SHA256, "EC", elliptic.P256()}, "ES384": {crypto.SHA384, "EC", elliptic.P384()}, "ES512": {crypto.SHA512, "EC", elliptic.P521()},
	"EdDSA": {0, "Ed", nil},
}

// Accepted reports whether alg is one of the algorithms verified.
func Accepted(alg string) bool {
	_, ok := algorithms[alg]
	return ok
}

// Verify checks t's signature with a key of set: the one of its kid when
// the token names one, else every key of a kind the algorithm fits.
// ErrUnknownKey: the token names a kid the set does not have (a rotation
// the set has not caught up with).
func (t *Token) Verify(set *KeySet) error {
	a, ok := algorithms[t.Header.Alg]
	if !ok {
		return ErrAlgorithm
	}
	tried := false
	for i := range set.Keys {
		k := &set.Keys[i]
		if t.Header.Kid != "" && k.ID != t.Header.Kid || k.Alg != "" && k.Alg != t.Header.Alg || !a.fits(k.pub) {
			continue
		}
		tried = true
		if a.verify(k.pub, t.signed, t.sig) {
			return nil
		}
	}
	if !tried {
		return ErrUnknownKey
	}
	return ErrBadSignature
}

func (a algorithm) fits(pub crypto.PublicKey) bool {
	switch k := pub.(type) {
	case *rsa.PublicKey:
		return a.kind == "RSA" || a.kind == "PSS"
	case *ecdsa.PublicKey:
		return a.kind == "EC" && k.Curve == a.curve
	case ed25519.PublicKey:
		return a.kind == "Ed"
	}
	return false
}

func (a algorithm) verify(pub crypto.PublicKey, signed string, sig []byte) bool {
	if a.kind == "Ed" {
		return ed25519.Verify(pub.(ed25519.PublicKey), []byte(signed), sig)
	}
	h := a.hash.New()
	h.Write([]byte(signed))
	digest := h.Sum(nil)
	switch a.kind {
	case "RSA":
		return rsa.VerifyPKCS1v15(pub.(*rsa.PublicKey), a.hash, digest, sig) == nil
	case "PSS":
		return rsa.VerifyPSS(pub.(*rsa.PublicKey), a.hash, digest, sig, &rsa.PSSOptions{SaltLength: rsa.PSSSaltLengthEqualsHash}) == nil
	case "EC":
		k := pub.(*ecdsa.PublicKey)
		size := (k.Curve.Params().BitSize + 7) / 8
		if len(sig) != 2*size {
			return false
		}
		// The JWS form (r and s, fixed size) as the ASN.1 the standard
		// library verifies, without the big.Int round trip of
		// ecdsa.Verify.
		return ecdsa.VerifyASN1(k, digest, ecdsaDER(sig[:size], sig[size:]))
	}
	return false
}

// ecdsaDER encodes an ECDSA signature's r and s (big-endian) as the DER
// SEQUENCE of two INTEGERs.
func ecdsaDER(r, s []byte) []byte {
	integer := func(out, v []byte) []byte {
		for len(v) > 1 && v[0] == 0 {
			v = v[1:]
		}
		pad := len(v) > 0 && v[0]&0x80 != 0
		n := len(v)
		if pad {
			n++
		}
		out = append(out, 0x02, byte(n))
		if pad {
			out = append(out, 0)
		}
		return append(out, v...)
	}
	body := integer(integer(make([]byte, 0, 2*(len(r)+3)+3), r), s)
	// At most 2*(66+3) = 138 bytes for P-521: one length byte, or 0x81
	// and one.
	head := []byte{0x30, byte(len(body))}
	if len(body) >= 0x80 {
		head = []byte{0x30, 0x81, byte(len(body))}
	}
	return append(head, body...)
}
