package sni

import (
	"crypto/tls"
	"testing"

	"portico.dev/portico/internal/testkit/snitest"
)

// BenchmarkEntryCertificate is the choice among two certificates of a
// handshake, with the pairs' leaves parsed when loaded and with them
// dropped (as translate holds pairs): after the entry's first handshake
// the two must cost the same.
func BenchmarkEntryCertificate(b *testing.B) {
	ec := issue(b, snitest.ECDSA, "dual.example.com")
	rs := issue(b, snitest.RSA, "dual.example.com")
	hello := &tls.ClientHelloInfo{
		ServerName:        "dual.example.com",
		SupportedVersions: []uint16{tls.VersionTLS12},
		CipherSuites:      []uint16{tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256},
		SupportedCurves:   []tls.CurveID{tls.CurveP256},
		SupportedPoints:   []uint8{0},
		SignatureSchemes:  []tls.SignatureScheme{tls.PSSWithSHA256, tls.PKCS1WithSHA256},
	}
	dropped := func(c *tls.Certificate) *tls.Certificate {
		cp := *c
		cp.Leaf = nil
		return &cp
	}
	for _, bc := range []struct {
		name  string
		certs []*tls.Certificate
	}{
		{"leaves parsed", []*tls.Certificate{ec, rs}},
		{"leaves dropped", []*tls.Certificate{dropped(ec), dropped(rs)}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			e := &Entry{Certificates: bc.certs}
			for b.Loop() {
				if _, err := e.Certificate(hello); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
