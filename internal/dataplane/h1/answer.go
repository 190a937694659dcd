package h1

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
)

// Answer reads the answers of an HTTP/1.x backend from one connection, in
// place of http.ReadResponse: a proxy that keeps one Answer per pooled
// connection reads an answer's head with two allocations (one string
// holding the head, every name and value a substring of it, and one array
// for the value slices) and its body without any, the header maps and the
// body reader being reused, cleared, for every answer.
//
// Value slices of Header and of Trailers are never reused by a later
// answer: they may be handed on (shared into another header map) once the
// answer was read. The maps themselves are cleared by the next ReadHead.
//
// Rules (RFC 9112), stricter than net/http's where two parsers could split
// the stream differently:
//   - status line "HTTP/1.0" or "HTTP/1.1", one space, exactly three digits
//     from 100 to 999, then the end of the line or a space and a reason
//     without control bytes (net/http takes other versions, several
//     spaces, a status below 100 and control bytes in the reason);
//   - lines end with CRLF or a bare LF (as net/http): Portico is the only
//     parser of the backend's stream and writes the head anew, so a bare LF
//     cannot be read differently by anyone after it;
//   - field lines as h1 reads requests: a token name directly followed by
//     the colon, no obs-fold (net/http joins folded lines), no control byte
//     but HTAB in a value, surrounding whitespace trimmed;
//   - no body for an answer to HEAD, a 1xx, 204 or 304, whatever its
//     headers say (their framing headers must still be valid);
//   - Transfer-Encoding: one field whose value is "chunked" (any case),
//     else the answer is refused; so is one in an HTTP/1.0 answer (net/http
//     ignores it there) and one together with Content-Length (net/http
//     drops the Content-Length; nginx refuses);
//   - Content-Length: digits only, at most 18 (net/http takes 19); identical values in several
//     fields or in a comma list are one (net/http refuses a list), differing
//     ones are refused; the header keeps the one value;
//   - neither: the body lasts until the backend closes, and the connection
//     cannot carry another request;
//   - Connection: an HTTP/1.1 answer with "close", an HTTP/1.0 one with
//     "close" or without "keep-alive", ends the connection; only HTTP/1.0
//     and 1.1 are taken;
//   - the connection carries another request (Reusable) only when the
//     answer's end was known and reached exactly and nothing after it is
//     buffered: bytes a backend sends past an answer's end are never read
//     as the next answer;
//   - chunked bodies under h1's request bounds: chunk-size line length,
//     framing overhead, size overflow, CRLF (not a bare LF) after each
//     chunk-size line, chunk's data and trailer line (net/http takes a bare
//     LF in trailers), whitespace allowed before a chunk extension (net/http
//     refuses it); trailers bounded by the head's limit and at most 64 KiB, a
//     trailer line by the connection's read buffer (net/http has no such
//     bound), forbidden trailer fields dropped (net/http keeps them).
//
// As net/http, a "Pragma: no-cache" without Cache-Control gains
// "Cache-Control: no-cache", and an announced trailer may not be named
// Transfer-Encoding, Trailer or Content-Length.
type Answer struct {
	// Status is the answer's status code, 100 to 999.
	Status int
	// Minor is the HTTP/1 minor version, 0 or 1.
	Minor int
	// Header holds the answer's fields, Transfer-Encoding and Trailer
	// included.
	Header http.Header
	// ContentLength is the body's length, -1 when it is chunked or lasts
	// until the connection closes. For an answer to HEAD it is what
	// Content-Length says (-1 without one), as net/http's.
	ContentLength int64
	// Announced holds the trailer names the Trailer field announced
	// (values nil) for a chunked body; empty otherwise.
	Announced http.Header
	// Close reports that the connection cannot carry another request
	// after this answer.
	Close bool

	head    []byte
	trailer http.Header
	body    body
	mode    int
	seen    fieldSet // the framing fields the head holds
}

// Body modes.
const (
	noBody = iota
	framedBody
	untilClose
)

// maxScratch is the largest head buffer kept for the next answer, the
// size of a pooled connection's read buffer, and maxKeptFields the most
// fields a map may have held to be cleared and kept rather than dropped:
// a backend sending one answer with a huge head or trailer section does
// not leave its connection holding that much, nor make every later answer
// clear the room it grew to.
const (
	maxScratch    = 4 << 10
	maxKeptFields = 64
)

// maxAnswerTrailer bounds an answer's trailer section: every trailer line
// costs an allocation, a map entry and a field written to the client, and
// real trailers (gRPC's status and message, checksums) are a few hundred
// bytes. net/http's reading took at most its reader's buffer, 4 KiB.
const maxAnswerTrailer = 64 << 10

// Release lets go of what the last answer holds (its values, its body
// reader, maps and a head buffer that grew large), for a connection that
// goes idle: nothing of an answer is held while the connection waits in a
// pool. The answer's fields and trailers are gone after it.
func (a *Answer) Release() {
	a.Header = forget(a.Header)
	a.Announced = forget(a.Announced)
	a.trailer = forget(a.trailer)
	a.body = body{}
	if cap(a.head) > maxScratch {
		a.head = nil
	}
}

// HopByHop reports whether the head read last held a hop-by-hop field
// (Connection, Proxy-Connection, Keep-Alive, Proxy-Authenticate,
// Proxy-Authorization, Te, Trailer, Transfer-Encoding or Upgrade): when it
// held none, a proxy has none to remove, and no field Connection names.
func (a *Answer) HopByHop() bool { return a.seen&hasHopByHop != 0 }

// forget clears h, or drops it when it grew past maxKeptFields.
func forget(h http.Header) http.Header {
	if len(h) > maxKeptFields {
		return nil
	}
	clear(h)
	return h
}

var errAnswerLine = errors.New("malformed status line")

// ReadHead reads the next answer's head from br, for a request with the
// given method; limit bounds the head's bytes and, with maxAnswerTrailer,
// the trailer's.
// The body is read with Read.
func (a *Answer) ReadHead(br *bufio.Reader, method string, limit int) error {
	a.Release()
	if a.Header == nil {
		a.Header = http.Header{}
	}
	if a.Announced == nil {
		a.Announced = http.Header{}
	}
	if a.trailer == nil {
		a.trailer = http.Header{}
	}
	a.Status, a.Minor, a.ContentLength, a.Close, a.mode, a.seen = 0, 0, -1, false, noBody, 0
	head, lines, err := readAnswerHead(br, a.head[:0], limit)
	a.head = head
	if err != nil {
		return err
	}
	if err := a.parse(string(head), lines); err != nil {
		return fmt.Errorf("backend answer: %w", err)
	}
	return a.frame(br, method, limit)
}

// readAnswerHead appends the status line and fields, up to the empty line,
// to buf, and counts their lines. A line may end with a bare LF.
func readAnswerHead(br *bufio.Reader, buf []byte, limit int) ([]byte, int, error) {
	lineStart, lines := 0, 0
	for {
		frag, err := br.ReadSlice('\n')
		if len(buf)+len(frag) > limit {
			return buf, 0, errors.New("backend answer head too large")
		}
		buf = append(buf, frag...)
		if err == bufio.ErrBufferFull {
			continue
		}
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return buf, 0, fmt.Errorf("reading the backend's answer head: %w", err)
		}
		n := len(buf) - lineStart
		if n == 1 || n == 2 && buf[lineStart] == '\r' {
			if lines == 0 {
				return buf, 0, fmt.Errorf("backend answer: %w", errAnswerLine)
			}
			return buf, lines, nil
		}
		lines++
		lineStart = len(buf)
	}
}

// nextLine cuts the first line of s, without its LF or CRLF.
func nextLine(s string) (line, rest string) {
	i := strings.IndexByte(s, '\n')
	line, rest = s[:i], s[i+1:]
	if n := len(line); n > 0 && line[n-1] == '\r' {
		line = line[:n-1]
	}
	return line, rest
}

func (a *Answer) parse(s string, lines int) error {
	line, rest := nextLine(s)
	if err := a.parseStatusLine(line); err != nil {
		return err
	}
	strs := make([]string, lines-1)
	for {
		line, rest = nextLine(rest)
		if line == "" {
			return nil
		}
		name, value, err := parseField(line)
		if err != nil {
			return fmt.Errorf("malformed field line: %w", err)
		}
		a.seen |= fieldOf(name)
		strs = addField(a.Header, strs, name, value)
	}
}

func (a *Answer) parseStatusLine(line string) error {
	if len(line) < 12 || line[:7] != "HTTP/1." || line[8] != ' ' {
		return errAnswerLine
	}
	switch line[7] {
	case '0':
		a.Minor = 0
	case '1':
		a.Minor = 1
	default:
		return errAnswerLine
	}
	code := line[9:12]
	if code[0] < '1' || code[0] > '9' || !isDigit(code[1]) || !isDigit(code[2]) {
		return errAnswerLine
	}
	a.Status = int(code[0]-'0')*100 + int(code[1]-'0')*10 + int(code[2]-'0')
	if reason := line[12:]; reason != "" {
		if reason[0] != ' ' {
			return errAnswerLine
		}
		for i := 1; i < len(reason); i++ {
			if c := reason[i]; c < ' ' && c != '\t' || c == 0x7f {
				return errAnswerLine
			}
		}
	}
	return nil
}

// frame decides where the answer ends.
func (a *Answer) frame(br *bufio.Reader, method string, limit int) error {
	h, seen := a.Header, a.seen
	if hp := seen.lookup(h, hasPragma, "Pragma"); len(hp) > 0 && hp[0] == "no-cache" {
		if _, ok := h["Cache-Control"]; !ok {
			h["Cache-Control"] = []string{"no-cache"}
		}
	}
	conn := seen.lookup(h, hasConnection, "Connection")
	if a.Minor == 1 {
		a.Close = hasToken(conn, "close")
	} else {
		a.Close = hasToken(conn, "close") || !hasToken(conn, "keep-alive")
	}
	length := int64(-1)
	if seen&hasContentLength != 0 {
		var err error
		if length, err = contentLength(h); err != nil {
			return fmt.Errorf("backend answer: %w", err)
		}
	}
	te := seen.lookup(h, hasTransferEncoding, "Transfer-Encoding")
	chunked := te != nil
	if chunked {
		switch {
		case a.Minor == 0:
			return errors.New("backend answer: Transfer-Encoding in HTTP/1.0")
		case length >= 0:
			return errors.New("backend answer: both Transfer-Encoding and Content-Length")
		case len(te) != 1 || !strings.EqualFold(te[0], "chunked"):
			return errors.New("backend answer: unsupported Transfer-Encoding")
		}
		for _, v := range h["Trailer"] {
			for name := range strings.SplitSeq(v, ",") {
				name = http.CanonicalHeaderKey(trimOWS(name))
				switch name {
				case "Transfer-Encoding", "Trailer", "Content-Length":
					return errors.New("backend answer: forbidden trailer announced")
				case "":
					continue
				}
				a.Announced[name] = nil
				a.trailer[name] = nil
			}
		}
	}
	switch {
	case method == http.MethodHead:
		a.ContentLength = length
		return nil
	case a.Status < 200 || a.Status == http.StatusNoContent || a.Status == http.StatusNotModified:
		a.ContentLength = 0
		return nil
	case chunked:
		a.mode = framedBody
		a.body = body{br: br, chunked: true, first: true, trailer: &a.trailer, maxTrailer: min(limit, maxAnswerTrailer)}
	case length == 0:
		a.ContentLength = 0
	case length > 0:
		a.ContentLength = length
		a.mode = framedBody
		a.body = body{br: br, remain: length}
	default:
		a.mode = untilClose
		a.body = body{br: br}
		a.Close = true
	}
	return nil
}

// contentLength returns the answer's length, -1 without Content-Length,
// leaving one value in the header when several agree.
func contentLength(h http.Header) (int64, error) {
	vv := h["Content-Length"]
	if len(vv) == 0 {
		return -1, nil
	}
	first, n := "", 0
	for _, v := range vv {
		for e := range strings.SplitSeq(v, ",") {
			e = trimOWS(e)
			if e == "" || len(e) > 18 || !allDigits(e) {
				return 0, errors.New("malformed Content-Length")
			}
			if n > 0 && e != first {
				return 0, errors.New("differing Content-Length values")
			}
			first = e
			n++
		}
	}
	if n > 1 {
		vv[0] = first
		h["Content-Length"] = vv[:1:1]
	}
	length, _ := strconv.ParseInt(first, 10, 64)
	return length, nil
}

// Read reads the answer's body; io.EOF is its end, read exactly. A body
// cut short fails with io.ErrUnexpectedEOF.
func (a *Answer) Read(p []byte) (int, error) {
	switch a.mode {
	case framedBody:
		return a.body.Read(p)
	case untilClose:
		if a.body.done {
			return 0, io.EOF
		}
		n, err := a.body.br.Read(p)
		if err == io.EOF {
			a.body.done = true
		}
		return n, err
	}
	return 0, io.EOF
}

// Trailers returns, as net/http's Response.Trailer, the announced trailer
// names (values nil) and, once Read returned io.EOF, the trailer fields
// read after a chunked body; forbidden fields are left out.
func (a *Answer) Trailers() http.Header { return a.trailer }

// Reusable reports whether the connection read through br can carry
// another request: the answer's end was known and reached, the answer did
// not end the connection, and nothing after it is buffered.
func (a *Answer) Reusable(br *bufio.Reader) bool {
	ended := a.mode == noBody || a.mode == framedBody && a.body.done && a.body.err == nil
	return ended && !a.Close && br.Buffered() == 0
}
