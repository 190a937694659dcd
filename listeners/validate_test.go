package listeners

import (
	"net"
	"regexp"
	"testing"
)

// schemaHostname is the Hostname pattern of the Gateway API CRD schema,
// the reference validHostname must agree with.
var schemaHostname = regexp.MustCompile(`^(\*\.)?[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)

func schemaValid(h string) bool {
	return h != "" && len(h) <= 253 && schemaHostname.MatchString(h) && net.ParseIP(h) == nil
}

func TestValidHostname(t *testing.T) {
	for h, want := range map[string]bool{
		"example.com":            true,
		"*.example.com":          true,
		"a":                      true,
		"a-b.c":                  true,
		"0.example":              true,
		"xn--bcher-kva.ch":       true,
		"":                       false,
		"*":                      false,
		"*.":                     false,
		"*.*.example.com":        false,
		"a.*.example.com":        false,
		"*example.com":           false,
		"Example.com":            false,
		"example.com.":           false,
		".example.com":           false,
		"a..b":                   false,
		"-a.b":                   false,
		"a-.b":                   false,
		"a.-b":                   false,
		"a_b.c":                  false,
		"192.168.0.1":            false,
		"1.2.3":                  true, // not an IP address for net.ParseIP, and the schema admits it
		"a b":                    false,
		"ex\u00e4mple.com":       false,
		string(make([]byte, 10)): false,
	} {
		if got := validHostname(h); got != want {
			t.Errorf("validHostname(%q) = %v, want %v", h, got, want)
		}
		if ref := schemaValid(h); ref != want {
			t.Errorf("the schema pattern says %v for %q: the case is wrong", ref, h)
		}
	}
	long := "a"
	for len(long) < 251 {
		long += ".a"
	}
	for _, h := range []string{long, long + "a", long + ".a", "*." + long} {
		if got, want := validHostname(h), schemaValid(h); got != want {
			t.Errorf("validHostname of %d bytes = %v, schema %v", len(h), got, want)
		}
	}
}

// TestValidHostnameAgreesWithSchema compares every string of up to 5 bytes
// over the bytes that matter to the pattern.
func TestValidHostnameAgreesWithSchema(t *testing.T) {
	const alphabet = "a0-.*A_"
	var walk func(prefix []byte)
	walk = func(prefix []byte) {
		h := string(prefix)
		if got, want := validHostname(h), schemaValid(h); got != want {
			t.Fatalf("validHostname(%q) = %v, the schema pattern says %v", h, got, want)
		}
		if len(prefix) == 5 {
			return
		}
		for i := 0; i < len(alphabet); i++ {
			walk(append(prefix, alphabet[i]))
		}
	}
	walk(nil)
}

func FuzzValidHostname(f *testing.F) {
	for _, h := range []string{"example.com", "*.a-b.example", "a..b", "-a", "1.2.3.4", "*.", "a-"} {
		f.Add(h)
	}
	f.Fuzz(func(t *testing.T, h string) {
		if got, want := validHostname(h), schemaValid(h); got != want {
			t.Fatalf("validHostname(%q) = %v, the schema pattern says %v", h, got, want)
		}
	})
}
