package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"text/template"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/promql/parser"
	"sigs.k8s.io/yaml"

	"portico.dev/portico/internal/admin"
	"portico.dev/portico/internal/testkit/freeport"
)

const monitoringDir = "../../charts/portico/monitoring"

// exportedFamilies runs "portico serve" standalone on the bundled example
// (moved to free loopback ports), makes it serve a request and fail a TLS
// handshake, and returns the metric families its /metrics lists with
// their types.
func exportedFamilies(t *testing.T) map[string]string {
	t.Helper()
	dir := t.TempDir()
	_, httpPort := freeport.Addr(t)
	_, tlsPort := freeport.Addr(t)
	echoAddr, echoPort := freeport.Addr(t)
	adminAddr, _ := freeport.Addr(t)
	files, err := filepath.Glob("../../examples/standalone/*")
	if err != nil {
		t.Fatal(err)
	}
	ports := strings.NewReplacer("port: 8080", "port: "+strconv.Itoa(httpPort), "port: 8443", "port: "+strconv.Itoa(tlsPort),
		"9180", strconv.Itoa(echoPort))
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasSuffix(f, ".yaml") {
			raw = []byte(ports.Replace(string(raw)))
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(f)), raw, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	logs := &lockedBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- serve(ctx, []string{"--config", dir, "--echo-backend", echoAddr, "--admin-address", adminAddr,
			"--bind-address", "127.0.0.1", "--drain-timeout", "1s"}, logs)
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
		if t.Failed() {
			t.Logf("portico log:\n%s", logs.String())
		}
	})
	waitUntil(t, "a request served", func() error {
		code, body, err := httpGet("http://127.0.0.1:"+strconv.Itoa(httpPort)+"/hello", "app.example.com")
		if err != nil || code != 200 {
			return fmt.Errorf("%d %s %v", code, body, err)
		}
		return nil
	})
	// Plain text on the TLS port: a handshake failure (not_tls).
	conn, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(tlsPort), 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(conn, "GET / HTTP/1.1\r\nHost: shop.example.com\r\n\r\n")
	_ = conn.SetReadDeadline(time.Now().Add(2 * time.Second))
	_, _ = bufio.NewReader(conn).ReadString('\n')
	conn.Close()

	families := map[string]string{}
	waitUntil(t, "every family scraped", func() error {
		_, body, err := httpGet("http://"+adminAddr+"/metrics", "")
		if err != nil {
			return err
		}
		for line := range strings.SplitSeq(body, "\n") {
			if f := strings.Fields(line); len(f) == 4 && f[0] == "#" && f[1] == "TYPE" {
				families[f[2]] = f[3]
			}
		}
		if _, ok := families["portico_tls_handshake_failures_total"]; !ok {
			return fmt.Errorf("no handshake failure yet")
		}
		return nil
	})
	return families
}

// perGatewayFamilies are the families Portico's metrics export once a
// controller of per-Gateway data planes knows one (the standalone Portico
// of exportedFamilies has none): the lag of each data plane, by Gateway.
func perGatewayFamilies(t *testing.T) map[string]string {
	t.Helper()
	m := admin.NewMetrics()
	m.SetDataPlaneLag(func() map[string]time.Duration { return map[string]time.Duration{"apps/web": time.Second} })
	gathered, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	families := map[string]string{}
	for _, mf := range gathered {
		families[mf.GetName()] = strings.ToLower(mf.GetType().String())
	}
	if _, ok := families["portico_dataplane_unacknowledged_seconds"]; !ok {
		t.Error("a data plane's lag is not exported")
	}
	return families
}

// prometheusOwn are the series Prometheus makes of every scrape target,
// which rules may name besides Portico's metrics.
var prometheusOwn = map[string]bool{"up": true}

// exported reports whether a metric name is one of families: a family
// itself, or a histogram's _bucket, _sum or _count series.
func exported(families map[string]string, name string) bool {
	if _, ok := families[name]; ok {
		return true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suffix); ok && (families[base] == "histogram" || families[base] == "summary") {
			return true
		}
	}
	return false
}

// grafanaVariables are the dashboard's placeholders, replaced by what
// Grafana would put there before the query reaches Prometheus.
var grafanaVariables = regexp.MustCompile(`\$(__rate_interval|__interval|__range)|\$\{?[a-z_]+\}?`)

func promQL(expr string) string {
	return grafanaVariables.ReplaceAllStringFunc(expr, func(v string) string {
		if strings.HasPrefix(v, "$__") {
			return "5m"
		}
		return "portico"
	})
}

// metricNames parses expr with Prometheus' own parser and returns the
// metric names it selects.
func metricNames(expr string) ([]string, error) {
	e, err := parser.NewParser(parser.Options{}).ParseExpr(expr)
	if err != nil {
		return nil, err
	}
	var names []string
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		if vs, ok := n.(*parser.VectorSelector); ok {
			name := vs.Name
			for _, m := range vs.LabelMatchers {
				if m.Name == model.MetricNameLabel {
					name = m.Value
				}
			}
			names = append(names, name)
		}
		return nil
	})
	if len(names) == 0 {
		return nil, fmt.Errorf("selects no metric")
	}
	return names, nil
}

// TestMonitoringUsesExportedMetrics parses every expression of the alerting
// rules and of the Grafana dashboard with Prometheus' query parser and
// checks that every metric they name is one a running Portico exports.
func TestMonitoringUsesExportedMetrics(t *testing.T) {
	families := exportedFamilies(t)
	for _, want := range []string{"portico_build_info", "portico_certificates_earliest_expiry_timestamp_seconds", "portico_http_requests_total",
		"portico_backend_connections_opened_total", "portico_backend_open_connections", "portico_dataplanes_oldest_unacknowledged_seconds"} {
		if _, ok := families[want]; !ok {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	for name, typ := range perGatewayFamilies(t) {
		if _, ok := families[name]; !ok {
			families[name] = typ
		}
	}
	check := func(where, expr string) {
		t.Helper()
		names, err := metricNames(expr)
		if err != nil {
			t.Errorf("%s: %v\n%s", where, err, expr)
			return
		}
		for _, n := range names {
			if !exported(families, n) && !prometheusOwn[n] {
				t.Errorf("%s: %s is not a metric Portico exports", where, n)
			}
		}
	}

	rules := alertRules(t)
	have := map[string]bool{}
	for _, r := range rules {
		check("alert "+r.Alert, r.Expr)
		have[r.Alert] = true
	}
	// The failures that matter, each with its alert.
	for _, want := range []string{"PorticoNoLeader", "PorticoConfigurationNotApplied", "PorticoACMERenewalsFailing",
		"PorticoCertificateExpiresSoon", "PorticoHighErrorRate", "PorticoDown", "PorticoReplicaDown",
		"PorticoStatusWritesFailing", "PorticoConfigurationSlowToApply", "PorticoBackendFailing", "PorticoDataPlaneBehind"} {
		if !have[want] {
			t.Errorf("no alert %s", want)
		}
	}

	raw, err := os.ReadFile(filepath.Join(monitoringDir, "dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string
			Type    string
			Targets []struct{ Expr string }
		}
		Templating struct {
			List []struct {
				Name       string
				Definition string
			}
		}
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("dashboard.json: %v", err)
	}
	queries := 0
	shown := map[string]bool{}
	for _, p := range dash.Panels {
		if p.Type != "row" && len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, target := range p.Targets {
			check("panel "+p.Title, promQL(target.Expr))
			names, _ := metricNames(promQL(target.Expr))
			for _, n := range names {
				shown[n] = true
			}
			queries++
		}
	}
	// What the dashboard is for: traffic by route and code, latency, TLS
	// handshake failures, configuration generations and durations,
	// certificates, ACME events, leader state.
	for _, want := range []string{"portico_http_requests_total", "portico_http_request_duration_seconds_bucket",
		"portico_tls_handshake_failures_total", "portico_config_generation", "portico_translate_duration_seconds_bucket",
		"portico_apply_duration_seconds_bucket", "portico_certificates_loaded", "portico_acme_events_total", "portico_leader",
		"portico_config_change_to_applied_seconds_bucket", "portico_status_writes_total",
		"portico_backend_requests_total", "portico_backend_retries_total", "portico_backend_request_duration_seconds_bucket",
		"portico_backend_endpoints_ejected_total", "portico_backend_connections_opened_total", "portico_backend_open_connections",
		"portico_dataplane_unacknowledged_seconds", "portico_dataplanes_oldest_unacknowledged_seconds"} {
		if !shown[want] {
			t.Errorf("the dashboard shows nothing of %s", want)
		}
	}
	labelValues := regexp.MustCompile(`^label_values\((.+), *[a-z_]+\)$`)
	for _, v := range dash.Templating.List {
		if v.Definition == "" {
			continue
		}
		m := labelValues.FindStringSubmatch(v.Definition)
		if m == nil {
			t.Errorf("variable %s: %q is not label_values(selector, label)", v.Name, v.Definition)
			continue
		}
		check("variable "+v.Name, promQL(m[1]))
	}
	t.Logf("%d alerting rules and %d dashboard queries checked against %d exported families", len(rules), queries, len(families))
}

type alertRule struct {
	Alert       string            `json:"alert"`
	Expr        string            `json:"expr"`
	For         string            `json:"for"`
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
}

func alertRules(t *testing.T) []alertRule {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(monitoringDir, "alerts.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Groups []struct {
			Name  string      `json:"name"`
			Rules []alertRule `json:"rules"`
		} `json:"groups"`
	}
	if err := yaml.UnmarshalStrict(raw, &file); err != nil {
		t.Fatalf("alerts.yaml: %v", err)
	}
	var rules []alertRule
	for _, g := range file.Groups {
		rules = append(rules, g.Rules...)
	}
	return rules
}

// TestAlertRulesAreComplete checks what Prometheus would refuse or what an
// on-call reader needs: a duration that parses, a severity, and
// annotations whose templates run on a sample alert.
func TestAlertRulesAreComplete(t *testing.T) {
	funcs := template.FuncMap{
		"humanizeDuration":   func(v any) string { return fmt.Sprint(v) },
		"humanizePercentage": func(v any) string { return fmt.Sprint(v) },
	}
	for _, r := range alertRules(t) {
		if r.Alert == "" || r.Expr == "" {
			t.Errorf("rule %+v: no alert name or expression", r)
		}
		if r.For != "" {
			if _, err := model.ParseDuration(r.For); err != nil {
				t.Errorf("%s: for %q: %v", r.Alert, r.For, err)
			}
		}
		if s := r.Labels["severity"]; s != "warning" && s != "critical" {
			t.Errorf("%s: severity %q", r.Alert, s)
		}
		if r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
			t.Errorf("%s: summary or description missing", r.Alert)
		}
		for name, text := range r.Annotations {
			// Prometheus defines $labels and $value before the annotation.
			tmpl, err := template.New(name).Funcs(funcs).Option("missingkey=zero").
				Parse("{{$labels := .Labels}}{{$value := .Value}}" + text)
			if err != nil {
				t.Errorf("%s: annotation %s: %v", r.Alert, name, err)
				continue
			}
			var out strings.Builder
			data := map[string]any{"Labels": map[string]string{"job": "portico", "namespace": "portico-system", "instance": "10.0.0.1:9090", "route": "apps/r"}, "Value": 0.5}
			if err := tmpl.Execute(&out, data); err != nil {
				t.Errorf("%s: annotation %s: %v", r.Alert, name, err)
			}
		}
	}
}
