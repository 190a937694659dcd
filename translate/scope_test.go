package translate

import (
	"path/filepath"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"portico.dev/portico/config"
	"portico.dev/portico/internal/controlplane/snapshot"
)

// TestScopeMatchesFull is the property the per-Gateway data planes rest
// on: over every fixture, for every Gateway, translating the Gateway's
// scoped snapshot (what its data plane is sent) gives the Config that
// translating the whole snapshot for that Gateway gives: the same ports,
// listeners, certificates, route tables and backend TLS, and the same
// endpoints for every backend those tables name. Cases with an address
// pool are left out: a Gateway's own data plane binds its pod's addresses
// and takes none from a pool, which is shared by definition.
func TestScopeMatchesFull(t *testing.T) {
	var cases []string
	for _, pattern := range []string{"testdata/*.in.yaml", filepath.Join(goldenDir, "*.in.yaml")} {
		found, err := filepath.Glob(pattern)
		if err != nil {
			t.Fatal(err)
		}
		cases = append(cases, found...)
	}
	checked := 0
	for _, path := range cases {
		var opts goldenOptions
		var res *snapshot.Resources
		if strings.Contains(path, goldenDir) {
			opts, res = loadGolden(t, path)
		} else {
			res = loadFixture(t, path)
		}
		if len(opts.AddressPool) > 0 {
			continue
		}
		for _, gw := range res.Gateways {
			key := nn(gw.Namespace, gw.Name)
			s := Settings{ControllerName: gwv1.GatewayController(opts.ControllerName), Gateway: &key}
			full, _ := Translate(s, res, Memory{})
			scoped, _ := Translate(s, Scope(res, key), Memory{})
			want, got := scopeDump(t, res, full.Config), scopeDump(t, res, scoped.Config)
			if want != got {
				t.Errorf("%s, Gateway %s: scoped Config differs (- full, + scoped):\n%s", path, key, goldenDiff(want, got))
			}
			checked++
		}
	}
	if checked < 50 {
		t.Fatalf("only %d Gateways checked: the fixtures were not found", checked)
	}
}

// scopeDump is a Config as the golden files show it, with only the
// endpoints of backends its route tables name (the whole snapshot has
// endpoints of every Service; a data plane needs those it routes to).
func scopeDump(t *testing.T, res *snapshot.Resources, cfg *config.Config) string {
	t.Helper()
	// Probed with HTTPRoute hostnames only: a TLSRoute's backend that
	// another Gateway's scope leaves out lists endpoints in the full
	// Config alone.
	var probes config.Probes
	for _, r := range res.HTTPRoutes {
		for _, h := range r.Spec.Hostnames {
			probes.RouteHostnames = append(probes.RouteHostnames, string(h))
		}
	}
	dp := config.Describe(cfg, probes)
	// Which backend TLS settings the pools keep is the whole snapshot's in
	// a full translate and only the Gateway's own in a scoped one; the
	// settings each backend uses are in the tables compared below.
	dp.BackendTLSIDs = nil
	eps := dp.Endpoints
	dp.Endpoints = nil
	tables, err := yaml.Marshal(dp)
	if err != nil {
		t.Fatal(err)
	}
	named := map[string][]string{}
	for k, v := range eps {
		if strings.Contains(string(tables), k) {
			named[k] = v
		}
	}
	dp.Endpoints = named
	out, err := yaml.Marshal(dp)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}
