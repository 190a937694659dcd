package sni

import (
	"bytes"
	"crypto/tls"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"portico.dev/portico/internal/testkit/snitest"
)

// testCA is shared by the tests of this package; issuing is the slow part.
var testCA = sync.OnceValues(snitest.NewCA)

func issue(t testing.TB, kind snitest.KeyKind, names ...string) *tls.Certificate {
	t.Helper()
	ca, err := testCA()
	if err != nil {
		t.Fatal(err)
	}
	p, err := ca.Issue(kind, serial.Add(1), names...)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := ParseKeyPair(p.CertPEM, p.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

// serial numbers the certificates issued by testCA.
var serial atomic.Int64

func TestTableLookup(t *testing.T) {
	entries := []*Entry{
		{Hostname: "foo.example.com", Value: "exact"},
		{Hostname: "*.example.com", Value: "wild1"},
		{Hostname: "*.b.example.com", Value: "wild2"},
		{Hostname: "*.c.b.example.com", Value: "wild3"},
		{Hostname: "Mixed.Example.NET.", Value: "mixed"},
		nil,
		{Hostname: "", Value: "fallback"},
	}
	tab := NewTable(entries)
	if tab.Len() != 6 {
		t.Errorf("Len = %d, want 6", tab.Len())
	}
	tests := []struct{ sni, want string }{
		{"foo.example.com", "exact"},
		{"a.example.com", "wild1"},        // wildcard, depth 1
		{"a.a.example.com", "wild1"},      // depth 2
		{"a.a.a.example.com", "wild1"},    // depth 3
		{"a.b.example.com", "wild2"},      // longest wildcard wins
		{"a.a.b.example.com", "wild2"},    // at depth 2 too
		{"a.c.b.example.com", "wild3"},    // and among three
		{"b.example.com", "wild1"},        // *.b.example.com does not cover b.example.com
		{"example.com", "fallback"},       // *.example.com does not cover example.com
		{"FOO.EXAMPLE.COM", "exact"},      // case
		{"foo.example.com.", "exact"},     // trailing dot
		{"x.C.B.Example.Com.", "wild3"},   // both
		{"mixed.example.net", "mixed"},    // the pattern is normalized too
		{"", "fallback"},                  // no SNI
		{"other.example.org", "fallback"}, // no match
		{"foo.example.com.evil.org", "fallback"},
	}
	for _, tt := range tests {
		e := tab.Lookup(tt.sni)
		if e == nil || e.Value != tt.want {
			t.Errorf("Lookup(%q) = %v, want %s", tt.sni, e, tt.want)
		}
	}
}

func TestTableLookupWithoutFallback(t *testing.T) {
	tab := NewTable([]*Entry{{Hostname: "a.example.com"}, {Hostname: "*.a.example.com"}})
	for _, sni := range []string{"", "b.example.com", "a.example.com.org", "example.com"} {
		if e := tab.Lookup(sni); e != nil {
			t.Errorf("Lookup(%q) = %+v, want nil", sni, e)
		}
	}
	var nilTable *Table
	if nilTable.Lookup("a.example.com") != nil || nilTable.Len() != 0 {
		t.Error("nil table matched")
	}
}

func TestTableFirstEntryWins(t *testing.T) {
	tab := NewTable([]*Entry{
		{Hostname: "a.example.com", Value: 1},
		{Hostname: "A.example.com.", Value: 2},
		{Hostname: "", Value: 3},
		{Hostname: "", Value: 4},
	})
	if e := tab.Lookup("a.example.com"); e.Value != 1 {
		t.Errorf("duplicate hostname: got %v, want the first entry", e.Value)
	}
	if e := tab.Lookup("z"); e.Value != 3 {
		t.Errorf("duplicate fallback: got %v, want the first entry", e.Value)
	}
}

func TestTableLookupDoesNotAllocate(t *testing.T) {
	tab := NewTable([]*Entry{{Hostname: "a.example.com"}, {Hostname: "*.example.com"}})
	for _, sni := range []string{"A.example.com", "x.y.example.com.", "miss.example.org", ""} {
		if n := testing.AllocsPerRun(100, func() { tab.Lookup(sni) }); n != 0 {
			t.Errorf("Lookup(%q) allocates %v times", sni, n)
		}
	}
}

func TestEntryCertificate(t *testing.T) {
	ec := issue(t, snitest.ECDSA, "dual.example.com")
	rs := issue(t, snitest.RSA, "dual.example.com")
	tls13 := []uint16{tls.VersionTLS13, tls.VersionTLS12}
	// A TLS 1.2 client offering only RSA key exchange cannot use an ECDSA key.
	rsaOnly := &tls.ClientHelloInfo{
		ServerName:        "dual.example.com",
		SupportedVersions: []uint16{tls.VersionTLS12},
		CipherSuites:      []uint16{tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256},
		SupportedCurves:   []tls.CurveID{tls.CurveP256},
		SupportedPoints:   []uint8{0},
		SignatureSchemes:  []tls.SignatureScheme{tls.PSSWithSHA256, tls.PKCS1WithSHA256},
	}
	modern := &tls.ClientHelloInfo{
		ServerName:        "dual.example.com",
		SupportedVersions: tls13,
		CipherSuites:      []uint16{tls.TLS_AES_128_GCM_SHA256},
		SupportedCurves:   []tls.CurveID{tls.X25519, tls.CurveP256},
		SignatureSchemes:  []tls.SignatureScheme{tls.ECDSAWithP256AndSHA256, tls.PSSWithSHA256},
	}
	tests := []struct {
		name  string
		certs []*tls.Certificate
		hello *tls.ClientHelloInfo
		want  *tls.Certificate
	}{
		{"ecdsa first, modern client", []*tls.Certificate{ec, rs}, modern, ec},
		{"ecdsa first, rsa-only client", []*tls.Certificate{ec, rs}, rsaOnly, rs},
		{"rsa first, modern client", []*tls.Certificate{rs, ec}, modern, rs},
		{"nothing supported: the first", []*tls.Certificate{ec}, rsaOnly, ec},
	}
	for _, tt := range tests {
		got, err := (&Entry{Certificates: tt.certs}).Certificate(tt.hello)
		if err != nil || got != tt.want {
			t.Errorf("%s: got %p, %v; want %p", tt.name, got, err, tt.want)
		}
	}
	if _, err := (&Entry{Hostname: "x"}).Certificate(modern); err == nil {
		t.Error("entry without certificates: no error")
	}
}

// Key pairs are held without their parsed leaf (translate drops it); an
// entry choosing among several parses the leaves at its first handshake
// only, and leaves the shared key pairs alone.
func TestEntryCertificateParsesLeavesOnce(t *testing.T) {
	withoutLeaf := func(c *tls.Certificate) *tls.Certificate {
		cp := *c
		cp.Leaf = nil
		return &cp
	}
	ec := withoutLeaf(issue(t, snitest.ECDSA, "dual.example.com"))
	rs := withoutLeaf(issue(t, snitest.RSA, "dual.example.com"))
	rsaOnly := &tls.ClientHelloInfo{
		ServerName:        "dual.example.com",
		SupportedVersions: []uint16{tls.VersionTLS12},
		CipherSuites:      []uint16{tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256},
		SupportedCurves:   []tls.CurveID{tls.CurveP256},
		SupportedPoints:   []uint8{0},
		SignatureSchemes:  []tls.SignatureScheme{tls.PSSWithSHA256, tls.PKCS1WithSHA256},
	}
	e := &Entry{Certificates: []*tls.Certificate{ec, rs}}
	first, err := e.Certificate(rsaOnly)
	if err != nil {
		t.Fatal(err)
	}
	if first.Leaf == nil || !bytes.Equal(first.Certificate[0], rs.Certificate[0]) || first.PrivateKey != rs.PrivateKey {
		t.Fatalf("got %+v; want the RSA pair with its leaf", first)
	}
	for range 3 {
		if again, _ := e.Certificate(rsaOnly); again != first {
			t.Fatal("a later handshake got another copy: the leaves were parsed again")
		}
	}
	if ec.Leaf != nil || rs.Leaf != nil {
		t.Error("the shared key pairs were modified")
	}
}

// refLookup is the reference for FuzzLookup: a linear scan over the entries
// that ranks each match and keeps the best, the first one on ties.
func refLookup(entries []*Entry, sni string) *Entry {
	name := refNormalize(sni)
	var best *Entry
	bestRank := -1
	for _, e := range entries {
		p := refNormalize(e.Hostname)
		rank := -1
		switch {
		case p == "" || p == "*":
			rank = 0
		case len(p) > 2 && p[:2] == "*.":
			if suffix := p[1:]; len(name) > len(suffix) && strings.HasSuffix(name, suffix) {
				rank = len(suffix)
			}
		case p == name:
			rank = math.MaxInt
		}
		if rank > bestRank {
			best, bestRank = e, rank
		}
	}
	return best
}

func refNormalize(s string) string {
	s = strings.TrimSuffix(s, ".")
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

// FuzzLookup compares Table with the linear-scan reference. hostnames is a
// newline-separated list of listener hostnames.
func FuzzLookup(f *testing.F) {
	f.Add("a.example.com\n*.example.com\n*.b.example.com\n", "x.b.example.com")
	f.Add("*.example.com\n\nfoo.example.com", "FOO.example.com.")
	f.Add("*.com\n*.a.com\n*.b.a.com", "c.b.a.com")
	f.Add("*.example.com", "example.com")
	f.Add("*.example.com\nx.example.com", "")
	f.Add("*..\n*.\n..", "a...")
	f.Fuzz(func(t *testing.T, hostnames, sni string) {
		var entries []*Entry
		for i, h := range strings.Split(hostnames, "\n") {
			entries = append(entries, &Entry{Hostname: h, Value: strconv.Itoa(i)})
		}
		got := NewTable(entries).Lookup(sni)
		if want := refLookup(entries, sni); got != want {
			t.Fatalf("Lookup(%q) over %q = %v, reference %v", sni, hostnames, got, want)
		}
	})
}
