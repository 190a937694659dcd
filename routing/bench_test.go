package routing

import (
	"fmt"
	"net/http"
	"testing"

	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// benchInput builds n routes, one per hostname (a fifth of them wildcards),
// each with several rules, plus a catch-all route without hostnames, all on
// one listener.
func benchInput(b *testing.B, n int) Input {
	f := loadFixture(b)
	for i := range n {
		host := fmt.Sprintf("svc-%d.ns-%d.example.com", i, i%97)
		if i%5 == 4 {
			host = fmt.Sprintf("*.apps-%d.example.com", i)
		}
		tr := testRoute{ns: "infra", name: fmt.Sprintf("r%d", i), age: i, hosts: []string{host}, rules: [][]gwv1.HTTPRouteMatch{
			{exact("/healthz")},
			{prefix("/api/v1", method("POST"))},
			{prefix("/api/v1", header("x-version", "canary"))},
			{prefix("/api/v1")},
			{prefix("/api")},
			{prefix("/static/", query("v", "2"))},
			{prefix("/")},
		}}
		f.in.Routes = append(f.in.Routes, tr.build("all-ns"))
	}
	f.in.Routes = append(f.in.Routes, testRoute{ns: "infra", name: "catch-all", age: n, rules: [][]gwv1.HTTPRouteMatch{{prefix("/")}}}.build("all-ns"))
	return f.in
}

func benchRequests(n int) []*http.Request {
	var reqs []*http.Request
	for i := 0; i < 64; i++ {
		k := (i * 7919) % n
		host := fmt.Sprintf("svc-%d.ns-%d.example.com", k, k%97)
		if k%5 == 4 {
			host = fmt.Sprintf("pod-%d.apps-%d.example.com:8080", i, k)
		}
		switch i % 6 {
		case 0:
			reqs = append(reqs, request("GET", host, "/api/v1/items/42"))
		case 1:
			reqs = append(reqs, request("POST", host, "/api/v1/items"))
		case 2:
			reqs = append(reqs, request("GET", host, "/api/v1/items", "X-Version", "canary"))
		case 3:
			reqs = append(reqs, request("GET", host, "/static/app.js?v=2"))
		case 4:
			reqs = append(reqs, request("GET", host, "/healthz"))
		default:
			reqs = append(reqs, request("GET", "unknown.example.org", "/index.html"))
		}
	}
	return reqs
}

func BenchmarkMatch(b *testing.B) {
	for _, n := range []int{1, 10, 1000, 10000} {
		b.Run(fmt.Sprintf("hosts=%d", n), func(b *testing.B) {
			in := benchInput(b, n)
			out := Compile(in)
			tb := out.Tables[0]
			for _, l := range in.Listeners {
				if l.Parent.Name == "all-ns" {
					tb = out.Tables[l.ID]
				}
			}
			reqs := benchRequests(n)
			for _, r := range reqs {
				if rule, _ := tb.Match(r); rule == nil {
					b.Fatalf("%s %s%s: no match", r.Method, r.Host, r.URL)
				}
			}
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				if rule, _ := tb.Match(reqs[i%len(reqs)]); rule == nil {
					b.Fatal("no match")
				}
			}
		})
	}
}

func BenchmarkCompile(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("routes=%d", n), func(b *testing.B) {
			in := benchInput(b, n)
			b.ReportAllocs()
			for b.Loop() {
				Compile(in)
			}
		})
	}
}

// manyListeners builds a Gateway with n listeners, one hostname each, and
// n routes that name the Gateway and one of those hostnames, as a
// deployment with a hostname per service does.
func manyListeners(tb testing.TB, n int) Input {
	f := loadFixture(tb)
	p := Parent{Kind: "Gateway", Namespace: "infra", Name: "many"}
	f.in.Parents[p] = true
	all := gwv1.NamespacesFromAll
	for i := range n {
		f.in.Listeners = append(f.in.Listeners, Listener{
			ID: len(f.in.Listeners), Parent: p, Name: gwv1.SectionName(fmt.Sprintf("l%d", i)),
			Port: 443, Protocol: gwv1.HTTPSProtocolType, Hostname: fmt.Sprintf("svc-%d.example.com", i), Accepted: true,
			AllowedRoutes:  gwv1.AllowedRoutes{Namespaces: &gwv1.RouteNamespaces{From: &all}},
			SupportedKinds: supportedKinds(gwv1.HTTPSProtocolType, nil),
		})
		f.in.Routes = append(f.in.Routes, testRoute{ns: "web", name: fmt.Sprintf("r%d", i), age: i,
			hosts: []string{fmt.Sprintf("svc-%d.example.com", i)}, rules: [][]gwv1.HTTPRouteMatch{{prefix("/")}}}.build("many"))
	}
	for _, r := range f.in.Routes {
		if r.Spec.ParentRefs[0].Name == "many" {
			r.Spec.ParentRefs[0].Namespace = ptr[gwv1.Namespace]("infra")
		}
	}
	return f.in
}

func BenchmarkCompileManyListeners(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("listeners=%d", n), func(b *testing.B) {
			in := manyListeners(b, n)
			b.ReportAllocs()
			for b.Loop() {
				Compile(in)
			}
		})
	}
}
