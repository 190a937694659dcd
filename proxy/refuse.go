package proxy

import (
	"net/http"
	"sync"
	"time"

	"go.uber.org/zap"

	"portico.dev/portico/config"
)

// refuseLogEvery is how often the same refusal is logged: every request of
// a broken rule would otherwise log one line.
const refuseLogEvery = 10 * time.Second

// refuse answers 500 (a gRPC call: UNAVAILABLE) for a rule or backend that
// cannot be served (what), and logs why. The reason names namespaces,
// Services and references, so it goes to the log and the route's status,
// never to the client.
func (f *forwarder) refuse(w http.ResponseWriter, r *http.Request, rule *config.Rule, what, why string) {
	if f.refusals.first(rule.RouteName+"\x00"+what+"\x00"+why, time.Now()) {
		f.log.Warn("request refused: "+what, zap.String("route", rule.RouteName), zap.Int("rule", rule.Index), zap.String("reason", why))
	}
	writeErrorFor(w, r, http.StatusInternalServerError)
}

// logLimiter lets a message through once per refuseLogEvery per key.
type logLimiter struct {
	mu   sync.Mutex
	last map[string]time.Time
}

// maxLimitedKeys bounds the memory of a logLimiter: past it, everything is
// forgotten, which costs a few repeated lines at worst.
const maxLimitedKeys = 1024

func (l *logLimiter) first(key string, now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if t, ok := l.last[key]; ok && now.Sub(t) < refuseLogEvery {
		return false
	}
	if l.last == nil || len(l.last) >= maxLimitedKeys {
		l.last = map[string]time.Time{}
	}
	l.last[key] = now
	return true
}
