package proxy

import (
	"errors"
	"io"
	"net/http"
)

// answerGate is the client's writer as both forwarding paths see it. It
// holds a backend's final status back until the first byte of its body or
// a flush passes: until then nothing of the answer has gone to the client,
// so a backend that fails mid-answer can still be answered with a 502 (or
// retried). Once it has passed, the only honest end of a failed answer is
// a cut. One failure contract for the direct path and ReverseProxy's,
// which otherwise differ in when their heads leave.
type answerGate struct {
	http.ResponseWriter
	// held is the final status not passed on yet; 0: none.
	held int32
	// n1xx counts the informational heads of the request's answers,
	// relayed while at most max1xx (negative: no cap).
	n1xx, max1xx int32
	// passed is set once a final head was passed on.
	passed bool
}

func (g *answerGate) WriteHeader(code int) {
	switch {
	case g.passed:
		g.ResponseWriter.WriteHeader(code) // superfluous: the server says so
	case code < 200 && code != http.StatusSwitchingProtocols:
		// A 1xx goes at once, as it came, up to the cap: past it the
		// forwarder fails the backend's answer (over1xx).
		g.n1xx++
		if !g.over1xx() {
			g.ResponseWriter.WriteHeader(code)
		}
	case code == http.StatusSwitchingProtocols:
		g.passed = true
		g.ResponseWriter.WriteHeader(code)
	case g.held == 0:
		g.held = int32(code)
	}
}

// over1xx reports whether the backend sent more informational heads than
// may be relayed.
func (g *answerGate) over1xx() bool { return g.max1xx >= 0 && g.n1xx > g.max1xx }

// errTooManyInformational fails an answer with more informational heads
// than Options.MaxInformational: a backend that sends them without end
// would otherwise hold the client (and a worker) for as long as it likes,
// each head a write to the client.
var errTooManyInformational = errors.New("backend sent too many informational (1xx) answers")

// pass sends the held head on.
func (g *answerGate) pass() {
	if g.passed {
		return
	}
	g.passed = true
	if g.held != 0 {
		g.ResponseWriter.WriteHeader(int(g.held))
	}
}

func (g *answerGate) Write(b []byte) (int, error) {
	if len(b) == 0 && !g.passed {
		return 0, nil
	}
	g.pass()
	return g.ResponseWriter.Write(b)
}

func (g *answerGate) FlushError() error {
	g.pass()
	return http.NewResponseController(g.ResponseWriter).Flush()
}

// Flush is for writers that look for http.Flusher (copyBody).
func (g *answerGate) Flush() { _ = g.FlushError() }

func (g *answerGate) Unwrap() http.ResponseWriter { return g.ResponseWriter }

// discard forgets a held answer, its header fields included: the failure
// is answered instead.
func (g *answerGate) discard() {
	g.held = 0
	clear(g.ResponseWriter.Header())
}

// answerBody records how reading a ReverseProxy answer's body ended:
// ReverseProxy itself only aborts the handler under a net/http server
// (package h1 and h2 are not), and otherwise ends the answer as if it
// were whole.
type answerBody struct {
	io.ReadCloser
	rp *rpAttempt
}

func (b *answerBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		b.rp.answerEnded()
	} else if err != nil && b.rp.err == nil {
		b.rp.err = err
	}
	return n, err
}
