package proxy

import (
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"net/url"
	"slices"
	"strings"
	"testing"
)

// parseClientCert splits a header value into its keys and unquoted values,
// as a backend would read it.
func parseClientCert(t *testing.T, v string) (keys, values []string) {
	t.Helper()
	for len(v) > 0 {
		k, rest, ok := strings.Cut(v, "=")
		if !ok {
			t.Fatalf("no = in %q", v)
		}
		keys = append(keys, k)
		var val strings.Builder
		if strings.HasPrefix(rest, `"`) {
			i := 1
			for ; i < len(rest) && rest[i] != '"'; i++ {
				if rest[i] == '\\' {
					i++
				}
				val.WriteByte(rest[i])
			}
			rest = rest[i+1:]
		} else {
			end := strings.IndexByte(rest, ';')
			if end < 0 {
				end = len(rest)
			}
			val.WriteString(rest[:end])
			rest = rest[end:]
		}
		values = append(values, val.String())
		v = strings.TrimPrefix(rest, ";")
	}
	return keys, values
}

// TestFormatClientCert: values that hold the format's separators are
// quoted, with quotes and backslashes escaped, so that a certificate cannot
// add keys of its own, and a reader gets every value back intact.
func TestFormatClientCert(t *testing.T) {
	u, _ := url.Parse("spiffe://cluster/ns/a;b")
	c := &x509.Certificate{
		Raw:      []byte("der"),
		Subject:  pkix.Name{CommonName: `evil";Hash=00`, Organization: []string{`a\b`}},
		URIs:     []*url.URL{u},
		DNSNames: []string{"client.example.com"},
	}
	keys, values := parseClientCert(t, formatClientCert(c))
	if want := []string{"Hash", "Cert", "Subject", "URI", "DNS"}; !slices.Equal(keys, want) {
		t.Fatalf("keys %q, want %q", keys, want)
	}
	sum := sha256.Sum256(c.Raw)
	pemText, err := url.QueryUnescape(values[1])
	if err != nil {
		t.Fatal(err)
	}
	want := []string{hex.EncodeToString(sum[:]), "", c.Subject.String(), u.String(), "client.example.com"}
	for i := range want {
		if i != 1 && values[i] != want[i] {
			t.Errorf("%s = %q, want %q", keys[i], values[i], want[i])
		}
	}
	if !strings.HasPrefix(pemText, "-----BEGIN CERTIFICATE-----\n") {
		t.Errorf("Cert %q is not the PEM", pemText)
	}
}
