package filesource

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"portico.dev/portico/internal/controlplane/validation"
)

var update = flag.Bool("update", false, "rewrite testdata/messages.golden")

// messageCases are files a user gets wrong, each refused with a message
// naming the file, the line, the object and the field.
var messageCases = []struct{ name, yaml string }{
	{"unknown field in a list", `apiVersion: v1
kind: Service
metadata: {name: a}
---
# the route
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: x}
spec:
  parentRefs: [{name: gw}]
  rules:
  - matches:
    - path: {tpye: Exact, value: /}
`},
	{"unknown field in spec", `apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: g, namespace: apps}
spec:
  gatewayClassName: x
  listners: []
`},
	{"unknown field in metadata", `apiVersion: v1
kind: Secret
metadata:
  name: s
  lables: {a: b}
`},
	{"unknown top-level field", `apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: c}
sepc: {controllerName: portico.dev/gateway-controller}
`},
	{"a string for a number", `apiVersion: gateway.networking.k8s.io/v1
kind: ListenerSet
metadata: {name: l, namespace: apps}
spec:
  parentRef: {name: gw}
  listeners:
  - name: http
    port: eighty
    protocol: HTTP
`},
	{"an object for a list", `apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: r}
spec:
  hostnames: {a: example.com}
`},
	{"a field given twice", `apiVersion: v1
kind: Service
metadata: {name: svc}
spec:
  ports: [{port: 80}]
  ports: [{port: 81}]
`},
	{"refused by a rule", `apiVersion: v1
kind: Service
metadata: {name: a}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: g, namespace: apps}
spec:
  gatewayClassName: x
  listeners:
  - {name: http, port: 70000, protocol: HTTP}
`},
	{"unsupported kind", `apiVersion: example.com/v1
kind: Widget
metadata: {name: w}
`},
	{"not YAML", `apiVersion: v1
kind: Service
metadata: {name: a
`},
	{"not YAML in a later document", `apiVersion: v1
kind: Service
metadata: {name: a}
---
apiVersion: v1
kind: Service
metadata: {name: b}
spec:
  selector: [a
`},
	{"bad separator", `apiVersion: v1
kind: Service
metadata: {name: a}
--- x
`},
	{"an XBackendTrafficPolicy's budget interval past an hour", `apiVersion: gateway.networking.x-k8s.io/v1alpha1
kind: XBackendTrafficPolicy
metadata: {name: budget, namespace: apps}
spec:
  targetRefs: [{group: "", kind: Service, name: web}]
  retryConstraint:
    budget: {percent: 20, interval: 2h}
`},
	{"an XBackendTrafficPolicy's Permanent cookie without absoluteTimeout", `apiVersion: gateway.networking.x-k8s.io/v1alpha1
kind: XBackendTrafficPolicy
metadata: {name: sticky, namespace: apps}
spec:
  targetRefs: [{group: "", kind: Service, name: web}]
  sessionPersistence:
    type: Cookie
    cookie: {lifetimeType: Permanent}
`},
	{"an XBackendTrafficPolicy of an unknown field", `apiVersion: gateway.networking.x-k8s.io/v1alpha1
kind: XBackendTrafficPolicy
metadata: {name: typo, namespace: apps}
spec:
  targetRefs: [{group: "", kind: Service, name: web}]
  retryConstraints: {}
`},
}

// The messages of refused files, against testdata/messages.golden (go
// test -update rewrites it).
func TestRefusalMessages(t *testing.T) {
	admit, err := validation.New()
	if err != nil {
		t.Fatal(err)
	}
	var got strings.Builder
	for _, tc := range messageCases {
		_, err := Decode("gateway.yaml", strings.NewReader(tc.yaml), admit)
		if err == nil {
			t.Errorf("%s: decoded", tc.name)
			continue
		}
		got.WriteString("== " + tc.name + "\n" + err.Error() + "\n")
	}
	golden := filepath.Join("testdata", "messages.golden")
	if *update {
		if err := os.WriteFile(golden, []byte(got.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if got.String() != string(want) {
		t.Errorf("messages differ from %s:\n%s", golden, got.String())
	}
}
