package translate

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"flag"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
	"sigs.k8s.io/yaml"

	"portico.dev/portico/config"
	"portico.dev/portico/internal/controlplane/filesource"
	"portico.dev/portico/internal/controlplane/snapshot"
	"portico.dev/portico/internal/controlplane/status"
)

var update = flag.Bool("update", false, "rewrite the golden *.out.yaml files of translate tests")

// golden is what a translate test asserts: every status and the shape of
// the data plane config.
type golden struct {
	Ports          []goldenPort                        `json:"ports,omitempty"`
	Endpoints      map[string][]string                 `json:"endpoints,omitempty"`
	GatewayClasses map[string]gwv1.GatewayClassStatus  `json:"gatewayClasses,omitempty"`
	Gateways       map[string]gwv1.GatewayStatus       `json:"gateways,omitempty"`
	ListenerSets   map[string]gwv1.ListenerSetStatus   `json:"listenerSets,omitempty"`
	HTTPRoutes     map[string][]gwv1.RouteParentStatus `json:"httpRoutes,omitempty"`
}

type goldenPort struct {
	Port      int32            `json:"port"`
	Protocol  string           `json:"protocol"`
	Listeners []goldenListener `json:"listeners"`
}

type goldenListener struct {
	Key          string   `json:"key"`
	Hostname     string   `json:"hostname,omitempty"`
	Routes       bool     `json:"routes"`
	Certificates []string `json:"certificates,omitempty"`
}

// fixedSource is a file source whose clock stands still, so creation times
// and the output are the same on every run.
func fixedSource(path string) *filesource.Source {
	return filesource.NewWithClock(path, zap.NewNop(), func() time.Time { return time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC) })
}

// loadFixture decodes one *.in.yaml with a fixed clock.
func loadFixture(t testing.TB, path string) *snapshot.Resources {
	t.Helper()
	res, err := fixedSource(path).Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func toGolden(cfg *config.Config, st *status.Computed) golden {
	g := golden{
		Endpoints:      map[string][]string{},
		GatewayClasses: maps.Collect(st.GatewayClasses.All()),
		Gateways:       map[string]gwv1.GatewayStatus{},
		ListenerSets:   map[string]gwv1.ListenerSetStatus{},
		HTTPRoutes:     map[string][]gwv1.RouteParentStatus{},
	}
	for k, v := range st.Gateways.All() {
		g.Gateways[k.String()] = v
	}
	for k, v := range st.ListenerSets.All() {
		g.ListenerSets[k.String()] = v
	}
	for k, v := range st.HTTPRoutes.All() {
		g.HTTPRoutes[k.String()] = v
	}
	for k, eps := range cfg.Endpoints.All() {
		if len(eps.Addrs) > 0 {
			g.Endpoints[k.Service.String()+":"+itoa(k.Port)] = eps.Addrs
		}
	}
	for _, p := range cfg.Ports {
		gp := goldenPort{Port: p.Number, Protocol: p.Protocol.String()}
		for l := range p.All.Values() {
			gl := goldenListener{Key: l.Key, Hostname: l.Hostname, Routes: l.Routes != nil}
			if p.SNI != nil {
				if e := p.SNI.Lookup(sniProbe(l.Hostname)); e != nil && e.Value == l {
					for _, c := range e.Certificates {
						gl.Certificates = append(gl.Certificates, leafOf(c).Subject.CommonName)
					}
				}
			}
			gp.Listeners = append(gp.Listeners, gl)
		}
		slices.SortFunc(gp.Listeners, func(a, b goldenListener) int { return strings.Compare(a.Key, b.Key) })
		g.Ports = append(g.Ports, gp)
	}
	slices.SortFunc(g.Ports, func(a, b goldenPort) int { return int(a.Port - b.Port) })
	return g
}

// sniProbe turns a listener hostname into a name its SNI entry matches.
func sniProbe(h string) string {
	if strings.HasPrefix(h, "*.") {
		return "probe" + h[1:]
	}
	if h == "" {
		return "fallback.probe.invalid"
	}
	return h
}

func itoa(n int32) string {
	b, _ := yaml.Marshal(n)
	return strings.TrimSpace(string(b))
}

// TestTranslateGolden runs every testdata/*.in.yaml through translate and
// compares with *.out.yaml. Run with -update to regenerate, then read the
// diff: a changed golden file is a changed behaviour.
func TestTranslateGolden(t *testing.T) {
	inputs, err := filepath.Glob("testdata/*.in.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(inputs) == 0 {
		t.Fatal("no golden inputs in testdata/")
	}
	for _, in := range inputs {
		name := strings.TrimSuffix(filepath.Base(in), ".in.yaml")
		t.Run(name, func(t *testing.T) {
			res := loadFixture(t, in)
			cfg, st := newTranslator().Translate(res)
			got, err := yaml.Marshal(toGolden(cfg, st))
			if err != nil {
				t.Fatal(err)
			}
			outPath := strings.TrimSuffix(in, ".in.yaml") + ".out.yaml"
			if *update {
				if err := os.WriteFile(outPath, got, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(outPath)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("translate output differs from %s (run with -update and review the diff):\n%s", outPath, lineDiff(string(want), string(got)))
			}
		})
	}
}

// lineDiff shows the lines that differ, enough to see what changed.
func lineDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	var b strings.Builder
	for i := 0; i < max(len(w), len(g)); i++ {
		var wl, gl string
		if i < len(w) {
			wl = w[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if wl != gl {
			b.WriteString("line ")
			b.WriteString(itoa(int32(i + 1)))
			b.WriteString(":\n  want: " + wl + "\n  got:  " + gl + "\n")
		}
	}
	return b.String()
}

// leafOf parses the leaf of a key pair translate produced: it holds the
// pair without its parsed leaf, which it checked when it loaded the pair.
func leafOf(c *tls.Certificate) *x509.Certificate {
	if c.Leaf != nil {
		panic("translate kept a parsed leaf")
	}
	leaf, err := x509.ParseCertificate(c.Certificate[0])
	if err != nil {
		panic(err)
	}
	return leaf
}
