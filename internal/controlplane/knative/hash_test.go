package knative

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// goldenSpec and goldenHash are the vector of the KIngress contract: the
// spec of default/hello in upstream's encoding, and its hash.
const (
	goldenSpec = `{"tls":[{"hosts":["hello.example.com"],"secretName":"s","secretNamespace":"default"}],` +
		`"rules":[{"hosts":["hello.example.com"],"visibility":"ExternalIP","http":{"paths":[{"headers":{"Knative-Serving-Tag":{"exact":"t"}},` +
		`"splits":[{"serviceNamespace":"default","serviceName":"hello-00001","servicePort":80,"percent":100,` +
		`"appendHeaders":{"Knative-Serving-Revision":"hello-00001"}}],"appendHeaders":{"A":"1","B":"2"}}]}}]}`
	goldenHash = "54ce5d07e930f80308fe134ef9b7492a23cdacb92aa536d2b1b0f97878e5862b"
)

func ingress(t *testing.T, ns, name, spec string) *Ingress {
	t.Helper()
	ing := &Ingress{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	if err := json.Unmarshal([]byte(spec), &ing.Spec); err != nil {
		t.Fatalf("decoding %s: %v", spec, err)
	}
	return ing
}

func sum(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

func TestHashGoldenVector(t *testing.T) {
	ing := ingress(t, "default", "hello", goldenSpec)
	b, err := json.Marshal(&ing.Spec)
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != goldenSpec {
		t.Errorf("encoding differs from upstream's:\n got %s\nwant %s", b, goldenSpec)
	}
	got, err := Hash(ing)
	if err != nil {
		t.Fatal(err)
	}
	if got != goldenHash {
		t.Errorf("Hash = %s, want %s", got, goldenHash)
	}
}

// TestHashEncoding checks the encoding of every field against JSON written
// out by hand in upstream's order, and the defaults the hash sees.
func TestHashEncoding(t *testing.T) {
	cases := []struct {
		name, in, defaulted string
	}{{
		name:      "a lone split without percent counts as 100",
		in:        `{"rules":[{"hosts":["a.ns.svc.cluster.local"],"visibility":"ClusterLocal","http":{"paths":[{"splits":[{"serviceNamespace":"ns","serviceName":"a","servicePort":"http"}]}]}}]}`,
		defaulted: `{"rules":[{"hosts":["a.ns.svc.cluster.local"],"visibility":"ClusterLocal","http":{"paths":[{"splits":[{"serviceNamespace":"ns","serviceName":"a","servicePort":"http","percent":100}]}]}}]}`,
	}, {
		name:      "every path field, in order; an empty exact is kept; two splits keep their percents",
		in:        `{"rules":[{"hosts":["b.example.com"],"http":{"paths":[{"path":"/p","rewriteHost":"b.ns.svc","headers":{"X":{"exact":""}},"splits":[{"serviceNamespace":"","serviceName":"","servicePort":0,"percent":70},{"serviceNamespace":"ns","serviceName":"c","servicePort":8080}],"appendHeaders":{"Z":"1"}}]}}],"httpOption":"Redirected"}`,
		defaulted: `{"rules":[{"hosts":["b.example.com"],"http":{"paths":[{"path":"/p","rewriteHost":"b.ns.svc","headers":{"X":{"exact":""}},"splits":[{"serviceNamespace":"","serviceName":"","servicePort":0,"percent":70},{"serviceNamespace":"ns","serviceName":"c","servicePort":8080}],"appendHeaders":{"Z":"1"}}]}}],"httpOption":"Redirected"}`,
	}, {
		name:      "a rule without http, an empty path list",
		in:        `{"rules":[{"hosts":["c"]},{"http":{"paths":[]}}]}`,
		defaulted: `{"rules":[{"hosts":["c"]},{"http":{"paths":[]}}]}`,
	}, {
		name:      "empty spec",
		in:        `{}`,
		defaulted: `{}`,
	}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ing := ingress(t, "ns", "name", c.in)
			b, err := json.Marshal(&ing.Spec)
			if err != nil {
				t.Fatal(err)
			}
			if string(b) != c.in {
				t.Errorf("round trip:\n got %s\nwant %s", b, c.in)
			}
			got, err := Hash(ing)
			if err != nil {
				t.Fatal(err)
			}
			if want := sum(c.defaulted + "ns" + "name"); got != want {
				t.Errorf("Hash = %s, want %s (of %s)", got, want, c.defaulted)
			}
			// Defaulting works on a copy.
			if b2, _ := json.Marshal(&ing.Spec); string(b2) != c.in {
				t.Errorf("Hash changed the spec: %s", b2)
			}
		})
	}
}

func TestHashNamespaceAndName(t *testing.T) {
	a, _ := Hash(ingress(t, "default", "hello", goldenSpec))
	b, _ := Hash(ingress(t, "defaul", "thello", goldenSpec))
	c, _ := Hash(ingress(t, "other", "hello", goldenSpec))
	if a != b {
		t.Error("the hash covers namespace and name concatenated: default+hello and defaul+thello must agree")
	}
	if a == c {
		t.Error("another namespace gave the same hash")
	}
}
