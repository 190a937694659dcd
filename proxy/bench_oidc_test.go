package proxy

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"portico.dev/portico/config"
)

// BenchmarkOIDCSession is the data plane's cost of a request with a valid
// OIDC session, in process (no sockets): the session cookie read from its
// chunks, opened (AES-GCM) and decoded, the session cookies stripped and
// the access token forwarded. The provider is never asked. one-chunk has
// tokens of a typical size (about 2.5 KB sealed), three-chunks large ones.
func BenchmarkOIDCSession(b *testing.B) {
	for _, tc := range []struct {
		name  string
		token int // bytes of each of the ID, access and refresh tokens
	}{{"one-chunk", 800}, {"three-chunks", 3000}} {
		b.Run(tc.name, func(b *testing.B) {
			opts := DefaultOptions()
			opts.SessionKey = oidcTestKey
			g := newGuard(opts, nil)
			o := testOIDC("https://idp.example")
			o.ForwardAccessToken = true
			sec := &config.Security{OIDC: o}
			now := time.Now()
			s := oidcSession{IDToken: strings.Repeat("i", tc.token), AccessToken: strings.Repeat("a", tc.token), RefreshToken: strings.Repeat("r", tc.token),
				AccessExpiry: now.Add(time.Hour).Unix(), End: now.Add(time.Hour).Unix()}
			plain, _ := json.Marshal(s)
			rec := httptest.NewRecorder()
			setChunked(rec.Header(), http.Cookie{Name: "p-session"}, g.oidcFlows.sealer.seal(sealSession, oidcScope(o), now.Add(time.Hour), plain), 0)
			var cookie []string
			for _, c := range (&http.Response{Header: rec.Header()}).Cookies() {
				cookie = append(cookie, c.Name+"="+c.Value)
			}
			cookie = append(cookie, "theme=dark")
			header := strings.Join(cookie, "; ")
			w := httptest.NewRecorder()
			r := httptest.NewRequest(http.MethodGet, "/page", nil)
			b.ReportAllocs()
			for b.Loop() {
				r.Header = http.Header{"Cookie": {header}, "Accept": {"text/html"}}
				if !g.check(w, r, sec, config.EndpointTable{}) {
					b.Fatalf("refused: %d", w.Code)
				}
			}
		})
	}
}
