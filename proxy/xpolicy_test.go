package proxy

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"portico.dev/portico/config"
	"portico.dev/portico/routing"
)

// Tests of what an XBackendTrafficPolicy gives a Service's backends
// (config.Backend.Session and Budget), on real sockets, with the rule
// compiled by routing from a Service carrying them as translate makes it.

// xPolicyProxy serves rule over Service svc, whose policy gives x, with
// endpoints eps; apply serves new endpoints. logs, when set, gets the
// access log.
type xPolicyProxy struct {
	*balanced
	apply func(eps []string)
}

func startXPolicy(t *testing.T, rule gwv1.HTTPRouteRule, x routing.Service, eps []string, logs *observer.ObservedLogs, core zapcore.Core) *xPolicyProxy {
	t.Helper()
	cfg := func(port int, eps []string) *config.Config {
		table := compileRoute(t, ruleRoute("svc", rule), httpService("svc", x))
		return onePortConfig(port, table, nil, map[string][]string{"svc": eps})
	}
	opts := DefaultOptions()
	opts.BindAddress = "127.0.0.1"
	opts.DrainTimeout = 5 * time.Second
	if core != nil {
		opts.AccessLog = zap.New(core)
	}
	rt := New(opts, zap.NewNop())
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = rt.Close(ctx)
	})
	port := freePort(t)
	if err := rt.Apply(cfg(port, eps)); err != nil {
		t.Fatal(err)
	}
	p := &xPolicyProxy{balanced: &balanced{t: t, rt: rt, port: port, url: fmt.Sprintf("http://127.0.0.1:%d/", port)}}
	p.apply = func(eps []string) {
		if err := rt.Apply(cfg(port, eps)); err != nil {
			t.Fatal(err)
		}
	}
	return p
}

func mustSession(t *testing.T, sp *gwv1.SessionPersistence, name string) *config.SessionPersistence {
	t.Helper()
	s, err := routing.SessionPersistence(sp, name)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestXPolicySessionAffinity: a Service whose policy sets a session
// cookie, behind a rule without one (endpoints round robin otherwise):
// the first answer opens a session; 1,000 requests carrying it reach the
// same endpoint of 10 and get no new cookie, and so do 1,000 more after a
// reload that reorders the endpoints. A rule with its own
// sessionPersistence keeps its own cookie: the rule's is the more
// specific.
func TestXPolicySessionAffinity(t *testing.T) {
	addrs, byAddr := namedBackends(t, "e", 10)
	x := routing.Service{Session: mustSession(t, cookieSP("web-affinity", false, ""), "unused")}
	p := startXPolicy(t, gwv1.HTTPRouteRule{}, x, addrs, nil, nil)
	c := keptAliveClient()

	first := p.ask(c, http.Header{})
	ck := sessionCookie(t, first)
	if ck.Name != "web-affinity" || ck.Path != "/" {
		t.Fatalf("session cookie %q, want web-affinity with Path=/", first.setCookie[0])
	}
	// Without it, round robin moves on.
	if again := p.ask(c, http.Header{}); again.by == first.by {
		t.Fatalf("two requests without a session both went to %s: the endpoints are not spread", first.by)
	}
	with := http.Header{"Cookie": {"sid=other; web-affinity=" + ck.Value}}
	stick := func(phase string) {
		t.Helper()
		for i := range 1000 {
			if a := p.ask(c, with); a.by != first.by || len(a.setCookie) != 0 {
				t.Fatalf("%s: request %d went to %s (cookies %q), the session's endpoint is %s", phase, i, a.by, a.setCookie, first.by)
			}
		}
	}
	stick("first")
	shuffled := append([]string(nil), addrs...)
	rand.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
	p.apply(shuffled)
	stick("after a reload")

	// The session's endpoint gone: elsewhere, with a new session.
	var rest []string
	for _, a := range addrs {
		if byAddr[a] != first.by {
			rest = append(rest, a)
		}
	}
	p.apply(rest)
	if moved := p.ask(c, with); moved.by == first.by || len(moved.setCookie) != 1 {
		t.Fatalf("after its endpoint left: went to %s with cookies %q, want another endpoint and a new session", moved.by, moved.setCookie)
	}

	// A rule with its own sessionPersistence.
	rule := gwv1.HTTPRouteRule{SessionPersistence: cookieSP("rule-session", false, "")}
	q := startXPolicy(t, rule, x, addrs, nil, nil)
	got := q.ask(c, http.Header{})
	if rc := sessionCookie(t, got); rc.Name != "rule-session" {
		t.Fatalf("a rule with its own sessionPersistence set %q, want the rule's cookie", got.setCookie[0])
	}
	// The Service's cookie does not pin that rule's requests.
	seen := map[string]bool{}
	for range 20 {
		seen[q.ask(c, with).by] = true
	}
	if len(seen) < 2 {
		t.Errorf("the Service's session pinned a rule with a session of its own (only %v)", seen)
	}
}

// failingBackend answers 503 to a share of the requests (fail, out of
// 1,000; the rest 200) and counts what it is sent.
func failingBackend(t *testing.T, fail int) (addr string, calls *atomic.Int64) {
	t.Helper()
	calls = &atomic.Int64{}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{ReadHeaderTimeout: time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		if rand.IntN(1000) < fail {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, "ok")
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String(), calls
}

// sendMany sends n GETs from workers goroutines over kept-alive connections
// and returns the statuses by code.
func sendMany(t *testing.T, url string, n, workers int) map[int]int {
	t.Helper()
	c := keptAliveClient()
	var mu sync.Mutex
	codes := map[int]int{}
	var wg sync.WaitGroup
	var next atomic.Int64
	for range workers {
		wg.Go(func() {
			for next.Add(1) <= int64(n) {
				resp, err := c.Get(url)
				if err != nil {
					t.Errorf("GET: %v", err)
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				mu.Lock()
				codes[resp.StatusCode]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return codes
}

func retryOn503(attempts int) gwv1.HTTPRouteRule {
	return gwv1.HTTPRouteRule{Retry: &gwv1.HTTPRouteRetry{Codes: []gwv1.HTTPRouteRetryStatusCode{503}, Attempts: &attempts}}
}

// retryBudgetOutcomes counts the access log entries of requests whose
// retry the budget refused.
func retryBudgetOutcomes(logs *observer.ObservedLogs) int {
	return logs.FilterField(zap.String("outcome", outcomeRetryBudget)).Len()
}

// TestRetryBudgetHolds: a backend failing half of its requests behind a
// rule retrying a 503 once, and a budget of 20% over 10 s (the minimum
// rate one retry an hour): the retries the backend sees stay within 20%
// of all it is sent, and use most of that share; each retry refused is a
// 503 to the client marked retry_budget in the access log. Without the
// budget, every failure is retried.
func TestRetryBudgetHolds(t *testing.T) {
	const n = 600
	addr, calls := failingBackend(t, 500)
	core, logs := observer.New(zapcore.InfoLevel)
	x := routing.Service{Budget: &config.RetryBudget{Percent: 20, Interval: 10 * time.Second, MinRetries: 1, MinInterval: time.Hour}}
	p := startXPolicy(t, retryOn503(1), x, []string{addr}, logs, core)
	codes := sendMany(t, p.url, n, 4)
	total := calls.Load()
	retries := total - n
	if retries*100 > 20*total+100 { // the one retry of the minimum rate
		t.Errorf("backend saw %d retries of %d requests: past 20%%", retries, total)
	}
	if retries*100 < 15*total {
		t.Errorf("backend saw %d retries of %d requests: the budget of 20%% is left unused", retries, total)
	}
	refused := retryBudgetOutcomes(logs)
	if refused == 0 || refused > codes[503] {
		t.Errorf("%d requests marked retry_budget, %d answered 503: want some, each a 503", refused, codes[503])
	}
	// Every failure retried would make about 300 retries.
	if refused < 100 {
		t.Errorf("only %d retries refused of about 300 failures", refused)
	}
	t.Logf("%d requests: backend saw %d (%d retries, %.1f%%), %d retries refused, answers %v", n, total, retries, 100*float64(retries)/float64(total), refused, codes)

	// The same without a budget.
	addr, calls = failingBackend(t, 500)
	q := startXPolicy(t, retryOn503(1), routing.Service{}, []string{addr}, nil, nil)
	sendMany(t, q.url, n, 4)
	if unbounded := calls.Load() - n; unbounded*100 < 40*n {
		t.Errorf("without a budget the backend saw %d retries of %d requests, want about half", unbounded, n)
	}
}

// TestRetryBudgetMinRetryRate: with a budget of 0% and a minimum of 3
// retries a second, a backend that always fails gets exactly 3 retries
// of 10 requests sent at once, and 3 again a second later: the minimum
// holds at a rate too low for any share.
func TestRetryBudgetMinRetryRate(t *testing.T) {
	addr, calls := failingBackend(t, 1000)
	core, logs := observer.New(zapcore.InfoLevel)
	x := routing.Service{Budget: &config.RetryBudget{Percent: 0, Interval: 10 * time.Second, MinRetries: 3, MinInterval: time.Second}}
	p := startXPolicy(t, retryOn503(1), x, []string{addr}, logs, core)
	for round := range 2 {
		calls.Store(0)
		codes := sendMany(t, p.url, 10, 1)
		if got := calls.Load(); got != 13 {
			t.Errorf("round %d: backend saw %d requests, want 10 and 3 retries", round, got)
		}
		if codes[503] != 10 {
			t.Errorf("round %d: answers %v, want ten 503s", round, codes)
		}
		time.Sleep(1100 * time.Millisecond) // past the minimum's interval
	}
	if got := retryBudgetOutcomes(logs); got != 14 {
		t.Errorf("%d requests marked retry_budget, want 7 a round", got)
	}
}

// TestRetryBudgetAttack: clients driving a backend that always fails,
// through a rule that retries a 503 five times, cannot multiply the load
// it gets: with the CRD's default budget (20% over 10 s, 10 retries a
// second at least) the backend sees at most the requests over 0.8 and
// the minimum's retries, where the rule alone would send it six times the
// requests. A reload in the middle keeps the budget's counts.
func TestRetryBudgetAttack(t *testing.T) {
	const n = 1200
	addr, calls := failingBackend(t, 1000)
	x := routing.Service{Budget: &config.RetryBudget{Percent: 20, Interval: 10 * time.Second, MinRetries: 10, MinInterval: time.Second}}
	p := startXPolicy(t, retryOn503(5), x, []string{addr}, nil, nil)
	start := time.Now()
	sendMany(t, p.url, n/2, 16)
	p.apply([]string{addr})
	sendMany(t, p.url, n/2, 16)
	seconds := int64(time.Since(start)/time.Second) + 2
	total := calls.Load()
	bound := n*100/80 + 10*seconds
	if total > bound {
		t.Errorf("backend saw %d requests for %d sent: past the budget's %d", total, n, bound)
	}
	t.Logf("%d requests sent with 5 retries each: the backend saw %d (without a budget: %d), in %s", n, total, 6*n, time.Since(start).Round(time.Millisecond))
}
