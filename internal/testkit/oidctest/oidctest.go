// Package oidctest starts the real OpenID provider Portico's OIDC tests
// log in against (hack/oidc-provider.sh builds it from
// github.com/zitadel/oidc/v3) and drives a scripted browser through its
// login form.
package oidctest

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"portico.dev/portico/internal/testkit/proc"
)

// The provider's confidential client and user.
const (
	ClientID     = "web"
	ClientSecret = "secret"
	User         = "test-user2"
	Password     = "verysecure"
)

// Provider is the provider running on loopback.
type Provider struct {
	// Issuer is its issuer URL, with the trailing slash it signs.
	Issuer string
	p      *proc.Proc
}

// Requests is how many HTTP requests the provider has served.
func (p *Provider) Requests() int {
	log, _ := os.ReadFile(p.p.LogPath)
	return strings.Count(string(log), `msg="http request"`)
}

// Stop ends the provider.
func (p *Provider) Stop() {
	_ = p.p.Kill()
}

// Start builds (once, cached) and starts the provider with ClientID
// allowed to come back to redirect. hack is the repository's hack
// directory, relative to the test's package. It skips when the provider
// cannot be built here, unless PORTICO_REQUIRE_REAL=1.
func Start(t *testing.T, hack, redirect string) *Provider {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "bash", filepath.Join(hack, "oidc-provider.sh")).Output()
	if err != nil {
		msg := "the OpenID provider (hack/oidc-provider.sh) cannot be built here: " + err.Error()
		if os.Getenv("PORTICO_REQUIRE_REAL") == "1" {
			t.Fatal(msg)
		}
		t.Skip(msg + "; PORTICO_REQUIRE_REAL=1 makes this a failure")
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	bin := filepath.Join(lines[len(lines)-1], "oidc-provider")
	logPath := filepath.Join(t.TempDir(), "oidc-provider.log")
	pp, err := proc.Start("oidc-provider", logPath, bin, nil, "-listen", "127.0.0.1:0", "-redirect", redirect,
		"-client-id", ClientID, "-client-secret", ClientSecret)
	if err != nil {
		t.Fatal(err)
	}
	p := &Provider{p: pp}
	t.Cleanup(p.Stop)
	// The first line it prints is the issuer, once its socket is bound.
	deadline := time.Now().Add(30 * time.Second)
	for p.Issuer == "" {
		log, _ := os.ReadFile(logPath)
		for line := range strings.Lines(string(log)) {
			if strings.HasPrefix(line, "http://") {
				p.Issuer = strings.TrimSpace(line)
				break
			}
		}
		if exited, err := pp.Exited(); exited {
			t.Fatalf("the OpenID provider exited (%v):\n%s", err, pp.LogTail(4096))
		}
		if time.Now().After(deadline) {
			t.Fatalf("the OpenID provider did not start within 30s:\n%s", pp.LogTail(4096))
		}
		time.Sleep(20 * time.Millisecond)
	}
	return p
}

// Browser is a scripted browser: a cookie jar; redirects followed except
// one to StopAt.
type Browser struct {
	t      *testing.T
	Client *http.Client
	// StopAt is a path whose redirect is not followed ("": all are).
	StopAt string
}

// NewBrowser is a browser with an empty jar.
func NewBrowser(t *testing.T) *Browser {
	jar, _ := cookiejar.New(nil)
	b := &Browser{t: t}
	b.Client = &http.Client{Jar: jar, Timeout: 20 * time.Second, CheckRedirect: func(req *http.Request, via []*http.Request) error {
		if b.StopAt != "" && req.URL.Path == b.StopAt {
			return http.ErrUseLastResponse
		}
		if len(via) > 10 {
			return errors.New("too many redirects")
		}
		return nil
	}}
	return b
}

// Get fetches u as a page navigation (Accept: text/html), with extra
// headers h as name, value pairs.
func (b *Browser) Get(u string, h ...string) (*http.Response, string) {
	b.t.Helper()
	req, err := http.NewRequest(http.MethodGet, u, nil)
	if err != nil {
		b.t.Fatal(err)
	}
	req.Header.Set("Accept", "text/html,application/xhtml+xml")
	for i := 0; i+1 < len(h); i += 2 {
		req.Header.Set(h[i], h[i+1])
	}
	return b.Send(req)
}

// Send sends req and reads the whole answer.
func (b *Browser) Send(req *http.Request) (*http.Response, string) {
	b.t.Helper()
	resp, err := b.Client.Do(req)
	if err != nil {
		b.t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(body)
}

// Form is a POST of form to u.
func Form(t *testing.T, u string, form url.Values) *http.Request {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, u, strings.NewReader(form.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	return req
}

var loginFormID = regexp.MustCompile(`name="id" value="([^"]+)"`)

// Login goes to u without a session, fills the provider's login form as
// User and returns the provider's redirect to callbackPath, not followed.
func (b *Browser) Login(u, callbackPath string) *url.URL {
	b.t.Helper()
	b.StopAt = callbackPath
	defer func() { b.StopAt = "" }()
	resp, body := b.Get(u)
	m := loginFormID.FindStringSubmatch(body)
	if resp.StatusCode != http.StatusOK || m == nil {
		b.t.Fatalf("no login form at the provider: %d %s\n%s", resp.StatusCode, resp.Request.URL, body)
	}
	form := url.Values{"id": {m[1]}, "username": {User}, "password": {Password}}
	action := resp.Request.URL.ResolveReference(&url.URL{Path: "/login/username"})
	resp, body = b.Send(Form(b.t, action.String(), form))
	if resp.StatusCode != http.StatusFound {
		b.t.Fatalf("the login did not come back to the callback: %d %s", resp.StatusCode, body)
	}
	loc, err := resp.Location()
	if err != nil || loc.Path != callbackPath {
		b.t.Fatalf("the login came back to %v (%v), not %s", loc, err, callbackPath)
	}
	return loc
}
