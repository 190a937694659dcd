package h1

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"golang.org/x/net/http/httpguts"
)

// outcome is what a parser made of one answer: the head and body, the
// trailers, and what stayed in the stream after the answer's end.
type outcome struct {
	err           error
	status        int
	header        http.Header
	contentLength int64
	close         bool
	body          string
	trailer       http.Header
	rest          string
}

const testLimit = 64 << 10

func readWithNetHTTP(data []byte, method string) outcome {
	br := bufio.NewReaderSize(bytes.NewReader(data), 4096)
	resp, err := http.ReadResponse(br, &http.Request{Method: method})
	if err != nil {
		return outcome{err: err}
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return outcome{err: err}
	}
	rest, _ := io.ReadAll(br)
	return outcome{
		status: resp.StatusCode, header: resp.Header, contentLength: resp.ContentLength,
		close: resp.Close, body: string(body), trailer: resp.Trailer, rest: string(rest),
	}
}

func readWithAnswer(a *Answer, data []byte, method string) outcome {
	br := bufio.NewReaderSize(bytes.NewReader(data), 4096)
	if err := a.ReadHead(br, method, testLimit); err != nil {
		return outcome{err: err}
	}
	body, err := io.ReadAll(a)
	if err != nil {
		return outcome{err: err}
	}
	// The end was reached: what Reusable says depends on it alone now.
	close := a.Close
	rest, _ := io.ReadAll(br)
	return outcome{
		status: a.Status, header: a.Header, contentLength: a.ContentLength,
		close: close, body: string(body), trailer: a.Trailers(), rest: string(rest),
	}
}

// normalize leaves out what the two parsers keep differently without a
// difference for the proxy: the hop-by-hop framing fields (net/http
// deletes some of them, the proxy removes them all) and trailer fields a
// trailer may not carry (Portico drops them when reading, net/http when
// writing).
func normalize(h http.Header, trailer bool) http.Header {
	out := http.Header{}
	for k, vv := range h {
		switch {
		case !trailer && (k == "Transfer-Encoding" || k == "Trailer" || k == "Connection"):
		case trailer && !httpguts.ValidTrailerHeader(k):
		default:
			out[k] = vv
		}
	}
	return out
}

// Predicates over an answer's raw bytes, independent of either parser.
var (
	strictStatus = regexp.MustCompile(`^HTTP/1\.[01] [1-9][0-9][0-9]( [^\x00-\x08\x0a-\x1f\x7f]*)?$`)
	tokenName    = regexp.MustCompile("^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
)

// rawHead splits data at its first empty line (LF or CRLF ended) into the
// head's lines, without line ends, and what follows.
func rawHead(data []byte) (lines []string, after []byte) {
	s := string(data)
	for {
		i := strings.IndexByte(s, '\n')
		if i < 0 {
			return lines, nil
		}
		line := strings.TrimSuffix(s[:i], "\r")
		s = s[i+1:]
		if line == "" && len(lines) > 0 {
			return lines, []byte(s)
		}
		lines = append(lines, line)
	}
}

func fieldValues(lines []string, name string) []string {
	var vv []string
	for _, l := range lines[min(1, len(lines)):] {
		if n, v, ok := strings.Cut(l, ":"); ok && strings.EqualFold(n, name) {
			vv = append(vv, strings.Trim(v, " \t"))
		}
	}
	return vv
}

func hasControl(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < ' ' && c != '\t' || c == 0x7f {
			return true
		}
	}
	return false
}

// malformedLines reports a field line net/http takes and h1 does not: an
// obs-fold, whitespace or another non-token byte in the name, a control
// byte in the value.
func malformedLines(lines []string) bool {
	for _, l := range lines {
		n, v, ok := strings.Cut(l, ":")
		if !ok || !tokenName.MatchString(n) || hasControl(v) {
			return true
		}
	}
	return false
}

// intendedRefusals lists every answer Portico refuses although net/http
// takes it, each with why. A refusal the test finds outside this list
// fails it.
var intendedRefusals = []struct {
	why     string
	applies func(method string, lines []string, after []byte) bool
}{
	{
		// Only HTTP/1.0 and 1.1, one space, three digits from 100, no
		// control byte in the reason: net/http takes any HTTP/x.y,
		// several spaces, "099" or "+20", and any reason.
		"status line not strict",
		func(_ string, lines []string, _ []byte) bool {
			return len(lines) > 0 && !strictStatus.MatchString(lines[0])
		},
	},
	{
		// RFC 9112 5.2 lets a proxy reject an obs-fold; 5.1 forbids
		// whitespace before the colon; control bytes (a CR inside a
		// line, NUL) have no meaning in a value. net/http joins folded
		// lines and takes names with spaces.
		"malformed field line in the head",
		func(_ string, lines []string, _ []byte) bool {
			return len(lines) > 1 && malformedLines(lines[1:])
		},
	},
	{
		// Two framings in one answer: a parser before or after could
		// take the other (net/http drops the Content-Length).
		"Transfer-Encoding with Content-Length",
		func(_ string, lines []string, _ []byte) bool {
			return len(fieldValues(lines, "Transfer-Encoding")) > 0 && len(fieldValues(lines, "Content-Length")) > 0
		},
	},
	{
		// HTTP/1.0 has no Transfer-Encoding: net/http ignores it, a
		// parser after could honour it.
		"Transfer-Encoding in HTTP/1.0",
		func(_ string, lines []string, _ []byte) bool {
			return len(lines) > 0 && strings.HasPrefix(lines[0], "HTTP/1.0") && len(fieldValues(lines, "Transfer-Encoding")) > 0
		},
	},
	{
		// A Content-Length of 19 digits passes net/http's int63 and is
		// beyond any real body; h1 takes at most 18 digits.
		"Content-Length of more than 18 digits",
		func(_ string, lines []string, _ []byte) bool {
			for _, v := range fieldValues(lines, "Content-Length") {
				if len(strings.Trim(v, " \t")) > 18 {
					return true
				}
			}
			return false
		},
	},
	{
		// Trailer lines under h1's rules: CRLF ends (bodies in this test
		// carry no LF, so one without a CR before it is framing), no
		// obs-fold, no whitespace before the colon, no control byte.
		// net/http reads trailers as a head, with bare LFs and folds.
		"chunked framing or trailer not under h1's rules",
		func(_ string, lines []string, after []byte) bool {
			if !chunked(lines) {
				return false
			}
			for i, c := range after {
				if c == '\n' && (i == 0 || after[i-1] != '\r') {
					return true
				}
			}
			last := lastChunk.FindIndex(after)
			if last == nil {
				return false
			}
			tl, _ := rawHead(append([]byte("x\r\n"), after[last[1]:]...))
			return len(tl) > 1 && malformedLines(tl[1:])
		},
	},
	{
		// h1's chunk-size rules: at most 15 hex digits (net/http takes
		// 16), no control byte in an extension (net/http skips
		// extensions unread).
		"chunk-size line outside h1's bounds",
		func(_ string, lines []string, after []byte) bool {
			return chunked(lines) && (longChunkSize.Match(after) || chunkExtControl.Match(after))
		},
	},
}

var (
	longChunkSize   = regexp.MustCompile(`(?:^|\n)[0-9a-fA-F]{16}`)
	chunkExtControl = regexp.MustCompile(`(?:^|\n)[0-9a-fA-F]+[ \t]*;[^\n]*[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]`)
)

// intendedAcceptances lists every answer Portico takes although net/http
// refuses it.
var intendedAcceptances = []struct {
	why     string
	applies func(method string, lines []string, after []byte) bool
}{
	{
		// RFC 9110 8.6: a list of identical Content-Length values may be
		// taken as one; net/http takes them only in separate fields.
		"Content-Length as a list of identical values",
		func(_ string, lines []string, _ []byte) bool {
			for _, v := range fieldValues(lines, "Content-Length") {
				if strings.Contains(v, ",") {
					return true
				}
			}
			return false
		},
	},
	{
		// RFC 9112 7.1.1 allows whitespace (BWS) before a chunk
		// extension's ';', as h1 does for requests; net/http refuses it.
		"whitespace before a chunk extension",
		func(_ string, lines []string, after []byte) bool {
			return chunked(lines) && chunkExtBWS.Match(after)
		},
	},
}

var lastChunk = regexp.MustCompile(`(?:^|\n)0+[ \t]*(?:;[^\n]*)?\r?\n`)

var chunkExtBWS = regexp.MustCompile(`(^|\r\n)[0-9a-fA-F]+[ \t]+;`)

func chunked(lines []string) bool {
	te := fieldValues(lines, "Transfer-Encoding")
	return len(te) == 1 && strings.EqualFold(te[0], "chunked")
}

var fieldNames = []string{
	"Content-Type", "content-type", "X-Custom", "x-custom", "Cache-Control", "Set-Cookie",
	"Vary", "ETag", "etag", "Server", "X-A-B", "Pragma", "Keep-Alive", "Connection", "Date",
}

func randomValue(r *rand.Rand) string {
	const alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 ,;=/\"\t\x80\xff-_."
	b := make([]byte, r.IntN(24))
	for i := range b {
		b[i] = alphabet[r.IntN(len(alphabet))]
	}
	return string(b)
}

func randomBody(r *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.IntN(256))
		if b[i] == '\n' || b[i] == '\r' {
			b[i] = 'x'
		}
	}
	return b
}

// genAnswer writes a random valid answer (and sometimes a second one
// after it) for method.
func genAnswer(r *rand.Rand, method string) []byte {
	var b bytes.Buffer
	eol := "\r\n"
	if r.IntN(8) == 0 {
		eol = "\n"
	}
	statuses := []int{100, 103, 200, 200, 200, 201, 204, 206, 301, 304, 404, 500, 599, 999}
	status := statuses[r.IntN(len(statuses))]
	minor := 1
	if r.IntN(6) == 0 {
		minor = 0
	}
	reasons := []string{"", " OK", " Some Reason", " ", " \x80\tx"}
	fmt.Fprintf(&b, "HTTP/1.%d %d%s%s", minor, status, reasons[r.IntN(len(reasons))], eol)
	for range r.IntN(8) {
		name := fieldNames[r.IntN(len(fieldNames))]
		v := randomValue(r)
		if name == "Connection" || name == "Keep-Alive" {
			v = []string{"keep-alive", "close", "Keep-Alive, X-Custom", "upgrade"}[r.IntN(4)]
		}
		if name == "Pragma" && r.IntN(2) == 0 {
			v = "no-cache"
		}
		fmt.Fprintf(&b, "%s:%s%s%s", name, []string{" ", "", "\t "}[r.IntN(3)], v, eol)
	}
	if minor == 0 && r.IntN(2) == 0 {
		b.WriteString("Connection: keep-alive" + eol)
	}
	body := randomBody(r, r.IntN(300))
	framing := r.IntN(4)
	if minor == 0 && framing == 1 {
		framing = 0
	}
	switch framing {
	case 0:
		fmt.Fprintf(&b, "Content-Length: %d%s", len(body), eol)
		if r.IntN(6) == 0 {
			fmt.Fprintf(&b, "Content-Length: %d%s", len(body), eol)
		}
		b.WriteString(eol)
		if method != http.MethodHead && status >= 200 && status != 204 && status != 304 {
			b.Write(body)
		}
	case 1:
		b.WriteString([]string{"Transfer-Encoding: chunked", "transfer-encoding: Chunked", "Transfer-Encoding:chunked "}[r.IntN(3)] + eol)
		announced := []string{"X-Sum", "X-Other", "Host", "Content-Type"}
		if r.IntN(2) == 0 {
			fmt.Fprintf(&b, "Trailer: %s, %s%s", announced[r.IntN(4)], announced[r.IntN(4)], eol)
		}
		b.WriteString(eol)
		if method == http.MethodHead || status < 200 || status == 204 || status == 304 {
			break
		}
		for len(body) > 0 {
			n := min(len(body), 1+r.IntN(100))
			ext := []string{"", ";a=b", " ;x", ";q=\"v\""}[r.IntN(4)]
			fmt.Fprintf(&b, "%x%s\r\n%s\r\n", n, ext, body[:n])
			body = body[n:]
		}
		b.WriteString("0\r\n")
		for range r.IntN(3) {
			fmt.Fprintf(&b, "%s: %s\r\n", announced[r.IntN(4)], randomValue(r))
		}
		b.WriteString("\r\n")
	case 2:
		// Until the backend closes.
		b.WriteString(eol)
		if method != http.MethodHead && status >= 200 && status != 204 && status != 304 {
			b.Write(body)
		}
		return b.Bytes()
	case 3:
		b.WriteString(eol)
	}
	if r.IntN(3) == 0 {
		b.WriteString("HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nsecond")
	}
	return b.Bytes()
}

// mutate breaks an answer in one of the ways a backend (or an attacker
// behind one) would.
func mutate(r *rand.Rand, data []byte) []byte {
	lines, after := rawHead(data)
	if len(lines) == 0 {
		return data
	}
	rebuild := func(lines []string) []byte {
		return append([]byte(strings.Join(lines, "\r\n")+"\r\n\r\n"), after...)
	}
	insert := func(field string) []byte {
		i := 1 + r.IntN(len(lines))
		return rebuild(append(lines[:i:i], append([]string{field}, lines[i:]...)...))
	}
	switch r.IntN(14) {
	case 0:
		return data[:r.IntN(len(data)+1)]
	case 1:
		return insert("Content-Length: " + []string{"3", "0", "007", "5, 5", "5,6", "", "-1", "+5", "0x5", "1 2", "99999999999999999999", "1234567890123456789"}[r.IntN(12)])
	case 2:
		return insert("Transfer-Encoding: " + []string{"chunked", "gzip, chunked", "chunked, chunked", "identity", "chunked;q=1", "", "chunkedx", "CHUNKED"}[r.IntN(8)])
	case 3:
		lines[0] = []string{"HTTP/1.1 20 OK", "HTTP/1.1 2000 OK", "HTTP/2.0 200 OK", "HTTP/1.1  200 OK", "HTTP/1.1 099 OK",
			"HTTP/1.1 200OK", "http/1.1 200 OK", "HTTP/1.1 +20 OK", "HTTP/1.2 200 OK", "HTTP/1.1 200 O\x01K", "HTTP/1.1", "HTTP/1.1 -20 x", "HTTP/1.1 101 Switching"}[r.IntN(13)]
		return rebuild(lines)
	case 4:
		return bytes.ReplaceAll(data, []byte("\r\n"), []byte("\n"))
	case 5:
		return insert("X-Bad: a" + []string{"\x00", "\x01", "\r", "\x7f", "\x1b"}[r.IntN(5)] + "b")
	case 6:
		return insert(" folded")
	case 7:
		return insert([]string{"X-Space : v", "X Space: v", ": v", "no colon", "X-Ok:\tv\t"}[r.IntN(5)])
	case 8:
		i := r.IntN(len(data))
		out := bytes.Clone(data)
		out[i] = []byte("\r\n \t:0;aZ\x00")[r.IntN(9)]
		return out
	case 9:
		return insert("Content-Length: 2")
	case 10:
		return bytes.Replace(data, []byte("HTTP/1.1"), []byte("HTTP/1.0"), 1)
	case 11:
		return insert("Connection: close")
	case 12:
		// a chunk framing line with a bare LF, or a lone CR
		return bytes.Replace(data, []byte("\r\n0\r\n"), []byte([]string{"\r\n0\n", "\n0\r\n", "\r\n0\r\r\n"}[r.IntN(3)]), 1)
	default:
		return append(data, "HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nX"...)
	}
}

// TestAnswerAgreesWithNetHTTP reads generated and mutated answers with
// Answer and with http.ReadResponse: where Answer takes one, both must
// agree on everything the proxy uses and on where the next answer
// starts; every refusal of an answer net/http takes must be an intended
// one.
func TestAnswerAgreesWithNetHTTP(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var a Answer
	const n = 6000
	var accepted, refusedBoth, intended int
	for i := range n {
		method := http.MethodGet
		if r.IntN(6) == 0 {
			method = http.MethodHead
		}
		data := genAnswer(r, method)
		if i%2 == 1 {
			data = mutate(r, data)
			if r.IntN(3) == 0 {
				data = mutate(r, data)
			}
		}
		switch compareWithNetHTTP(t, &a, data, method) {
		case 0:
			accepted++
		case 1:
			refusedBoth++
		default:
			intended++
		}
	}
	t.Logf("%d answers: %d read alike, %d refused by both, %d intended differences", n, accepted, refusedBoth, intended)
	if accepted < n/3 {
		t.Errorf("only %d answers taken by both: the generator no longer makes valid answers", accepted)
	}
}

// compareWithNetHTTP reads data with a and with http.ReadResponse and
// fails t where they disagree without a listed reason. It returns 0 when
// both took the answer, 1 when both refused it, 2 for a listed difference.
func compareWithNetHTTP(t *testing.T, a *Answer, data []byte, method string) int {
	t.Helper()
	want := readWithNetHTTP(data, method)
	got := readWithAnswer(a, data, method)
	lines, after := rawHead(data)
	switch {
	case got.err != nil && want.err != nil:
		return 1
	case got.err != nil:
		if !listed(intendedRefusals, method, lines, after) {
			t.Errorf("%s %q: refused, net/http takes it: %v", method, data, got.err)
		}
		return 2
	case want.err != nil:
		if !listed(intendedAcceptances, method, lines, after) {
			t.Errorf("%s %q: taken, net/http refuses it: %v", method, data, want.err)
		}
		return 2
	}
	if got.status != want.status || got.contentLength != want.contentLength || got.close != want.close ||
		got.body != want.body || got.rest != want.rest ||
		!reflect.DeepEqual(normalize(got.header, false), normalize(want.header, false)) ||
		!reflect.DeepEqual(normalize(got.trailer, true), normalize(want.trailer, true)) {
		t.Errorf("%s %q:\n got %+v\nwant %+v", method, data, got, want)
	}
	return 0
}

// FuzzAnswerAgreesWithNetHTTP is TestAnswerAgreesWithNetHTTP's
// comparison on any bytes.
func FuzzAnswerAgreesWithNetHTTP(f *testing.F) {
	r := rand.New(rand.NewPCG(3, 4))
	for range 50 {
		f.Add(genAnswer(r, http.MethodGet), false)
		f.Add(mutate(r, genAnswer(r, http.MethodGet)), false)
		f.Add(genAnswer(r, http.MethodHead), true)
	}
	var a Answer
	f.Fuzz(func(t *testing.T, data []byte, head bool) {
		method := http.MethodGet
		if head {
			method = http.MethodHead
		}
		compareWithNetHTTP(t, &a, data, method)
	})
}

func listed(list []struct {
	why     string
	applies func(string, []string, []byte) bool
}, method string, lines []string, after []byte) bool {
	for _, e := range list {
		if e.applies(method, lines, after) {
			return true
		}
	}
	return false
}

// TestAnswerRules attacks each framing rule on its own: what the answer
// is, where it ends and whether the connection may carry another request.
func TestAnswerRules(t *testing.T) {
	const next = "HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nX"
	for _, tc := range []struct {
		name, method, data string
		err                bool
		body               string
		reusable           bool
	}{
		{"length", "GET", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", false, "ok", true},
		{"length then more", "GET", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok" + next, false, "ok", false},
		{"HEAD with a length", "HEAD", "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n", false, "", true},
		{"HEAD with a length and a body", "HEAD", "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello", false, "", false},
		{"HEAD chunked", "HEAD", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", false, "", true},
		{"204 with a length", "GET", "HTTP/1.1 204 No Content\r\nContent-Length: 5\r\n\r\n", false, "", true},
		{"304 chunked", "GET", "HTTP/1.1 304 Not Modified\r\nTransfer-Encoding: chunked\r\n\r\n", false, "", true},
		{"103 with a length", "GET", "HTTP/1.1 103 Early Hints\r\nContent-Length: 5\r\n\r\n", false, "", true},
		{"204 with a bad length", "GET", "HTTP/1.1 204 No Content\r\nContent-Length: x\r\n\r\n", true, "", false},
		{"chunked", "GET", "HTTP/1.1 200 OK\r\nTransfer-Encoding: CHUNKED\r\n\r\n2\r\nok\r\n0\r\n\r\n", false, "ok", true},
		{"chunked, trailer", "GET", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-T\r\n\r\n2\r\nok\r\n0\r\nX-T: 1\r\n\r\n", false, "ok", true},
		{"chunked list", "GET", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, chunked\r\n\r\n0\r\n\r\n", true, "", false},
		{"gzip, chunked", "GET", "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n", true, "", false},
		{"two TE fields", "GET", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", true, "", false},
		{"identity", "GET", "HTTP/1.1 200 OK\r\nTransfer-Encoding: identity\r\n\r\n", true, "", false},
		{"TE and CL", "GET", "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", true, "", false},
		{"TE in HTTP/1.0", "GET", "HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", true, "", false},
		{"same lengths", "GET", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nok", false, "ok", true},
		{"same lengths in a list", "GET", "HTTP/1.1 200 OK\r\nContent-Length: 2, 2\r\n\r\nok", false, "ok", true},
		{"differing lengths", "GET", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nok!", true, "", false},
		{"differing lengths in a list", "GET", "HTTP/1.1 200 OK\r\nContent-Length: 2, 3\r\n\r\nok!", true, "", false},
		{"signed length", "GET", "HTTP/1.1 200 OK\r\nContent-Length: +2\r\n\r\nok", true, "", false},
		{"huge length", "GET", "HTTP/1.1 200 OK\r\nContent-Length: 1234567890123456789\r\n\r\n", true, "", false},
		{"empty length", "GET", "HTTP/1.1 200 OK\r\nContent-Length: \r\n\r\n", true, "", false},
		{"until close", "GET", "HTTP/1.1 200 OK\r\n\r\nall of it", false, "all of it", false},
		{"HTTP/1.0 kept alive", "GET", "HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 2\r\n\r\nok", false, "ok", true},
		{"HTTP/1.0", "GET", "HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok", false, "ok", false},
		{"HTTP/1.0 until close", "GET", "HTTP/1.0 200 OK\r\nConnection: keep-alive\r\n\r\nok", false, "ok", false},
		{"Connection: close", "GET", "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok", false, "ok", false},
		{"HTTP/2.0", "GET", "HTTP/2.0 200 OK\r\nContent-Length: 0\r\n\r\n", true, "", false},
		{"HTTP/1.2", "GET", "HTTP/1.2 200 OK\r\nContent-Length: 0\r\n\r\n", true, "", false},
		{"status 099", "GET", "HTTP/1.1 099 OK\r\nContent-Length: 0\r\n\r\n", true, "", false},
		{"status of 2 digits", "GET", "HTTP/1.1 20 OK\r\nContent-Length: 0\r\n\r\n", true, "", false},
		{"status of 4 digits", "GET", "HTTP/1.1 2000 OK\r\nContent-Length: 0\r\n\r\n", true, "", false},
		{"two spaces", "GET", "HTTP/1.1  200 OK\r\nContent-Length: 0\r\n\r\n", true, "", false},
		{"no reason", "GET", "HTTP/1.1 200\r\nContent-Length: 0\r\n\r\n", false, "", true},
		{"status 999", "GET", "HTTP/1.1 999 x\r\nContent-Length: 0\r\n\r\n", false, "", true},
		{"control byte in reason", "GET", "HTTP/1.1 200 O\x00K\r\nContent-Length: 0\r\n\r\n", true, "", false},
		{"obs-fold", "GET", "HTTP/1.1 200 OK\r\nX-A: 1\r\n 2\r\nContent-Length: 0\r\n\r\n", true, "", false},
		{"space before colon", "GET", "HTTP/1.1 200 OK\r\nContent-Length : 5\r\n\r\nhello", true, "", false},
		{"NUL in a value", "GET", "HTTP/1.1 200 OK\r\nX-A: a\x00b\r\nContent-Length: 0\r\n\r\n", true, "", false},
		{"CR in a value", "GET", "HTTP/1.1 200 OK\r\nX-A: a\rb\r\nContent-Length: 0\r\n\r\n", true, "", false},
		{"bare LF", "GET", "HTTP/1.1 200 OK\nContent-Length: 2\n\nok", false, "ok", true},
		{"bare LF in a chunk line", "GET", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\nok\r\n0\r\n\r\n", true, "", false},
		{"chunk data without CRLF", "GET", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nokX0\r\n\r\n", true, "", false},
		{"chunk size overflow", "GET", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n10000000000000002\r\nok\r\n0\r\n\r\n", true, "", false},
		{"chunk cut", "GET", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nok", true, "", false},
		{"length cut", "GET", "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nok", true, "", false},
		{"head cut", "GET", "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n", true, "", false},
		{"trailer over the limit", "GET", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n" +
			strings.Repeat("X-T: "+strings.Repeat("a", 1000)+"\r\n", testLimit/1000+1) + "\r\n", true, "", false},
		{"forbidden trailer announced", "GET", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: Content-Length\r\n\r\n0\r\n\r\n", true, "", false},
	} {
		var a Answer
		br := bufio.NewReaderSize(strings.NewReader(tc.data), 4096)
		err := a.ReadHead(br, tc.method, testLimit)
		var body []byte
		if err == nil {
			body, err = io.ReadAll(&a)
		}
		if (err != nil) != tc.err || err == nil && string(body) != tc.body {
			t.Errorf("%s: body %q, error %v; want error %v", tc.name, body, err, tc.err)
			continue
		}
		if err == nil && a.Reusable(br) != tc.reusable {
			t.Errorf("%s: reusable %v", tc.name, !tc.reusable)
		}
	}
}

// TestAnswerHeadLimit: a head beyond the limit is refused before it is
// all read.
func TestAnswerHeadLimit(t *testing.T) {
	var a Answer
	head := "HTTP/1.1 200 OK\r\n" + strings.Repeat("X-A: "+strings.Repeat("a", 100)+"\r\n", 1000) + "\r\n"
	br := bufio.NewReaderSize(strings.NewReader(head), 4096)
	if err := a.ReadHead(br, "GET", 50<<10); err == nil {
		t.Fatal("a head of 100 KiB passed a limit of 50 KiB")
	}
	br = bufio.NewReaderSize(strings.NewReader(head), 4096)
	if err := a.ReadHead(br, "GET", len(head)); err != nil {
		t.Fatalf("a head at the limit: %v", err)
	}
}

// TestAnswerValuesNotReused: the value slices of one answer, handed on,
// keep their values while the Answer reads the next one.
func TestAnswerValuesNotReused(t *testing.T) {
	var a Answer
	br := bufio.NewReaderSize(strings.NewReader(
		"HTTP/1.1 200 OK\r\nX-A: first\r\nContent-Length: 0\r\n\r\n"+
			"HTTP/1.1 200 OK\r\nX-A: second\r\nContent-Length: 0\r\n\r\n"), 4096)
	if err := a.ReadHead(br, "GET", testLimit); err != nil {
		t.Fatal(err)
	}
	kept := a.Header["X-A"]
	if err := a.ReadHead(br, "GET", testLimit); err != nil {
		t.Fatal(err)
	}
	if kept[0] != "first" || a.Header.Get("X-A") != "second" {
		t.Errorf("kept %q, now %q", kept, a.Header["X-A"])
	}
}

// TestAnswerAllocations: the head of an answer costs two allocations and
// its body none.
func TestAnswerAllocations(t *testing.T) {
	const answer = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nDate: Wed, 25 Nov 2026 09:00:00 GMT\r\nContent-Length: 5\r\n\r\nhello"
	var a Answer
	sr := strings.NewReader(answer)
	br := bufio.NewReaderSize(sr, 4096)
	buf := make([]byte, 64)
	n := testing.AllocsPerRun(100, func() {
		sr.Reset(answer)
		br.Reset(sr)
		if err := a.ReadHead(br, "GET", testLimit); err != nil {
			t.Fatal(err)
		}
		for {
			if _, err := a.Read(buf); err != nil {
				break
			}
		}
	})
	if n > 2 {
		t.Errorf("%v allocations per answer", n)
	}
}

// TestAnswerForbiddenTrailers: trailer fields a trailer may not carry
// (framing, Host) are dropped as they are read, announced or not.
func TestAnswerForbiddenTrailers(t *testing.T) {
	var a Answer
	br := bufio.NewReaderSize(strings.NewReader("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: Host, X-Sum\r\n\r\n"+
		"2\r\nok\r\n0\r\nX-Sum: 1\r\nHost: evil\r\nContent-Length: 9\r\nTransfer-Encoding: chunked\r\nX-Late: 2\r\n\r\n"), 4096)
	if err := a.ReadHead(br, "GET", testLimit); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadAll(&a); err != nil {
		t.Fatal(err)
	}
	want := http.Header{"X-Sum": {"1"}, "X-Late": {"2"}, "Host": nil}
	if got := a.Trailers(); !reflect.DeepEqual(got, want) {
		t.Errorf("trailers %q, want %q", got, want)
	}
}

// TestAnswerHopByHop: HopByHop says whether the head read last held any
// hop-by-hop field, in any case of its name, so that a proxy that skips
// the removal for an answer without one skips nothing it had to remove;
// it forgets the previous answer's.
func TestAnswerHopByHop(t *testing.T) {
	var a Answer
	read := func(fields string) bool {
		t.Helper()
		br := bufio.NewReaderSize(strings.NewReader("HTTP/1.1 200 OK\r\n"+fields+"Content-Length: 0\r\n\r\n"), 4096)
		if err := a.ReadHead(br, "GET", testLimit); err != nil {
			t.Fatalf("%q: %v", fields, err)
		}
		return a.HopByHop()
	}
	for _, f := range []string{
		"Connection: close\r\n", "connection: X-Foo\r\nX-Foo: 1\r\n", "Proxy-Connection: keep-alive\r\n",
		"KEEP-ALIVE: timeout=5\r\n", "Proxy-Authenticate: Basic\r\n", "Proxy-Authorization: Basic x\r\n",
		"TE: trailers\r\n", "Upgrade: h2c\r\n",
	} {
		if !read(f) {
			t.Errorf("%q: HopByHop false", f)
		}
		if read("X-Other: 1\r\n") {
			t.Errorf("after %q, an answer without one: HopByHop true", f)
		}
	}
	br := bufio.NewReaderSize(strings.NewReader("HTTP/1.1 200 OK\r\nTrailer: X-Sum\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"), 4096)
	if err := a.ReadHead(br, "GET", testLimit); err != nil || !a.HopByHop() {
		t.Errorf("chunked answer with Trailer: HopByHop %v, %v", a.HopByHop(), err)
	}
}
