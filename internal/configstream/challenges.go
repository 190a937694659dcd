package configstream

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"strings"
	"time"

	"portico.dev/portico/internal/controlplane/snapshot"
)

// ChallengePath: GET ?gateway=namespace/name&host=...&token=..., the
// answer to an ACME HTTP-01 challenge, which the controller's ACME manager
// holds. A data plane asks for it when the CA reaches its Service on port
// 80.
const ChallengePath = "/v1/challenge"

const challengePrefix = "/.well-known/acme-challenge/"

// challengeToken is what an HTTP-01 token is: base64url.
var challengeToken = regexp.MustCompile(`^[A-Za-z0-9_-]{1,256}$`)

// ChallengeHandler answers ACME HTTP-01 challenges (acme.Manager).
type ChallengeHandler interface {
	HandleHTTPChallenge(w http.ResponseWriter, r *http.Request) bool
}

// challenge answers a data plane's question with the controller's ACME
// manager, as if the CA had asked the controller itself.
func (h *Hub) challenge(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	_, p, ok := h.authorize(w, r, q.Get("gateway"))
	if !ok {
		return
	}
	token, host := q.Get("token"), strings.ToLower(q.Get("host"))
	if name, _, err := net.SplitHostPort(host); err == nil {
		host = name
	}
	// Only its own Gateway's hostnames: the CA reaching this data plane
	// for another Gateway's name must not validate that Gateway's order
	// (a tenant's Gateway ordering a name whose DNS points at another
	// tenant's data plane).
	if h.Challenges == nil || !challengeToken.MatchString(token) || !p.hosts[host] {
		http.NotFound(w, r)
		return
	}
	ask := r.Clone(r.Context())
	ask.Host = host
	ask.URL = &url.URL{Path: challengePrefix + token}
	ask.Header = http.Header{}
	if !h.Challenges.HandleHTTPChallenge(w, ask) {
		http.NotFound(w, r)
	}
}

// listenerHosts are the hostnames of the listeners of a snapshot's
// Gateways and ListenerSets.
func listenerHosts(r *snapshot.Resources) map[string]bool {
	out := map[string]bool{}
	for _, g := range r.Gateways {
		for _, l := range g.Spec.Listeners {
			if l.Hostname != nil {
				out[strings.ToLower(string(*l.Hostname))] = true
			}
		}
	}
	for _, ls := range r.ListenerSets {
		for _, l := range ls.Spec.Listeners {
			if l.Hostname != nil {
				out[strings.ToLower(string(*l.Hostname))] = true
			}
		}
	}
	return out
}

// maxChallengeAnswer bounds an answer (a key authorization is ~100 bytes).
const maxChallengeAnswer = 4 << 10

// HandleHTTPChallenge answers the CA's HTTP-01 requests on the data plane's
// plain HTTP ports with what the controller's ACME manager says; false
// (the request goes on to routing) for anything else or when the
// controller does not know the token.
func (s *Source) HandleHTTPChallenge(w http.ResponseWriter, r *http.Request) bool {
	token, ok := strings.CutPrefix(r.URL.Path, challengePrefix)
	if !ok || !challengeToken.MatchString(token) || (r.Method != http.MethodGet && r.Method != http.MethodHead) {
		return false
	}
	answer, err := s.askChallenge(r.Context(), r.Host, token)
	if err != nil {
		s.Log.Debug("ACME challenge not answered by the controller")
		return false
	}
	w.Header().Set("Content-Type", "text/plain")
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodGet {
		_, _ = w.Write(answer)
	}
	return true
}

func (s *Source) askChallenge(ctx context.Context, host, token string) ([]byte, error) {
	tok, err := os.ReadFile(s.TokenFile)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	u := url.URL{Scheme: "https", Host: s.Controller, Path: ChallengePath, RawQuery: url.Values{
		"gateway": {s.Gateway.String()}, "host": {host}, "token": {token},
	}.Encode()}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(tok)))
	resp, err := s.httpClient().Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("controller answered %s", resp.Status)
	}
	return io.ReadAll(io.LimitReader(resp.Body, maxChallengeAnswer))
}
