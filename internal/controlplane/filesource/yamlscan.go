package filesource

import (
	"strconv"
	"strings"
)

// scanYAML parses the common shape of a configuration document into the
// tree the YAML parser makes of it for an `any` target (map[any]any,
// []any, string, int, bool, nil), without the parser's token machinery,
// which was most of what decoding a document cost.
//
// It knows a subset of YAML: a block mapping at the first column; block
// mappings and sequences (a sequence may sit at its key's column, an item
// may start a mapping on its own line); flow mappings and sequences on one
// line; plain scalars on one line; quoted scalars without escapes on one
// line; literal block scalars (`|`, `|-`) with the indentation found from
// their first line; comments. ok is false for anything else, and wherever
// the answer might differ from the parser's: anchors, aliases, tags,
// directives, tabs, bytes outside printable ASCII, keys that are not plain
// words resolving to strings, scalars that would resolve to a number other
// than a plain decimal int, a key given twice, any continuation line. The
// caller then parses the document with the library, so whatever the
// scanner does not take keeps the library's verdict and messages
// (TestScanYAMLMatchesTheParser, FuzzScanYAML).
func scanYAML(src []byte) (any, bool) {
	for _, c := range src {
		if c >= 0x7f || c < ' ' && c != '\n' {
			return nil, false
		}
	}
	s := yamlScanner{src: src}
	if s.nextLine() != 0 {
		return nil, false
	}
	v, next, ok := s.blockMapping(0)
	if !ok || next != -1 {
		return nil, false
	}
	return v, true
}

type yamlScanner struct {
	src   []byte
	p     int // the next byte
	line  int // where the current line starts
	depth int // of collections, held well under the parser's limit
}

const maxScanDepth = 64

// enter counts a collection begun; false when too deep.
func (s *yamlScanner) enter() bool {
	s.depth++
	return s.depth <= maxScanDepth
}

// at is the byte at p, 0 at the end.
func (s *yamlScanner) at() byte {
	if s.p < len(s.src) {
		return s.src[s.p]
	}
	return 0
}

// col is p's column.
func (s *yamlScanner) col() int { return s.p - s.line }

// nextLine moves p to the first byte of the next line that holds more
// than spaces and a comment, and returns its indentation; -1 at the end.
// p starts at the beginning of a line.
func (s *yamlScanner) nextLine() int {
	for s.p < len(s.src) {
		s.line = s.p
		for s.p < len(s.src) && s.src[s.p] == ' ' {
			s.p++
		}
		switch s.at() {
		case 0:
			return -1
		case '\n':
			s.p++
			continue
		case '#':
			s.skipLine()
			continue
		}
		return s.p - s.line
	}
	return -1
}

// skipLine moves p past the end of the line.
func (s *yamlScanner) skipLine() {
	for s.p < len(s.src) && s.src[s.p] != '\n' {
		s.p++
	}
	if s.p < len(s.src) {
		s.p++
	}
}

// endLine takes what may follow a value on its line (spaces, a comment)
// and the line's end; false if anything else follows.
func (s *yamlScanner) endLine() bool {
	for s.at() == ' ' {
		s.p++
	}
	switch s.at() {
	case 0:
		return true
	case '\n':
		s.p++
		return true
	case '#':
		// A comment needs a space before it.
		if s.p == 0 || s.src[s.p-1] != ' ' {
			return false
		}
		s.skipLine()
		return true
	}
	return false
}

// isSeqEntry is whether p is at a block sequence's "- ".
func (s *yamlScanner) isSeqEntry() bool {
	if s.at() != '-' {
		return false
	}
	next := byte(0)
	if s.p+1 < len(s.src) {
		next = s.src[s.p+1]
	}
	return next == ' ' || next == '\n' || next == 0
}

// keyAt is the plain key starting at p followed by ": " (or ":" at the
// line's end), and where its value starts; ok is false when p is not at
// such a key.
func (s *yamlScanner) keyAt() (key string, after int, ok bool) {
	i := s.p
	for i < len(s.src) && isKeyByte(s.src[i]) {
		i++
	}
	// The parser takes no implicit key of more than 1,024 characters.
	if i == s.p || i-s.p > 1000 || i >= len(s.src) || s.src[i] != ':' {
		return "", 0, false
	}
	if i+1 < len(s.src) && s.src[i+1] != ' ' && s.src[i+1] != '\n' {
		return "", 0, false
	}
	return string(s.src[s.p:i]), i + 1, true
}

func isKeyByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '/' || c == '-' || c == '_'
}

// stringKey is whether a plain key resolves to itself, a string.
func stringKey(k string) bool {
	switch k[0] {
	case '+', '-', '.', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
		return false
	}
	_, special := plainWord(k)
	return !special
}

// plainWord is the value of a plain scalar the YAML 1.1 parser resolves
// to a boolean or null by its table of words.
func plainWord(s string) (any, bool) {
	switch s {
	case "y", "Y", "yes", "Yes", "YES", "true", "True", "TRUE", "on", "On", "ON":
		return true, true
	case "n", "N", "no", "No", "NO", "false", "False", "FALSE", "off", "Off", "OFF":
		return false, true
	case "~", "null", "Null", "NULL":
		return nil, true
	}
	return nil, false
}

// plainValue resolves a plain scalar as the parser does, for the scalars
// whose resolution it can tell without the parser: words, plain decimal
// ints and strings that cannot be numbers or timestamps.
func plainValue(s string) (any, bool) {
	if s == "" {
		return nil, false
	}
	switch c := s[0]; {
	case c >= '0' && c <= '9':
		if dottedString(s) {
			return s, true
		}
		if len(s) > 18 || len(s) > 1 && c == '0' {
			return nil, false
		}
		for i := range len(s) {
			if s[i] < '0' || s[i] > '9' {
				return nil, false
			}
		}
		n, err := strconv.Atoi(s)
		return n, err == nil
	case c == '+' || c == '-' || c == '.' || c == '<':
		return nil, false
	}
	if v, ok := plainWord(s); ok {
		return v, true
	}
	return s, true
}

// dottedString is whether s, starting with a digit, is a string all the
// same because it holds two dots and neither '-' nor '_' (an IPv4
// address, a hostname): no integer, float or timestamp has that form.
func dottedString(s string) bool {
	return strings.Count(s, ".") >= 2 && !strings.ContainsAny(s, "-_")
}

// blockMapping reads the entries of a mapping at column col, p at its
// first key, and returns it with the indentation of the line after it.
func (s *yamlScanner) blockMapping(col int) (map[any]any, int, bool) {
	if !s.enter() {
		return nil, 0, false
	}
	defer func() { s.depth-- }()
	m := map[any]any{}
	for {
		key, after, ok := s.keyAt()
		if !ok || !stringKey(key) {
			return nil, 0, false
		}
		if _, dup := m[key]; dup {
			return nil, 0, false
		}
		s.p = after
		v, next, ok := s.mappingValue(col)
		if !ok {
			return nil, 0, false
		}
		m[key] = v
		switch {
		case next == col:
			continue
		case next < col:
			return m, next, true
		}
		return nil, 0, false
	}
}

// mappingValue reads the value of a key of a mapping at column col, p
// past the key's colon.
func (s *yamlScanner) mappingValue(col int) (any, int, bool) {
	for s.at() == ' ' {
		s.p++
	}
	if c := s.at(); c != 0 && c != '\n' && c != '#' {
		return s.inlineValue(col)
	}
	if !s.endLine() {
		return nil, 0, false
	}
	next := s.nextLine()
	switch {
	case next > col:
		return s.blockNode(next)
	case next == col && s.isSeqEntry():
		return s.blockSequence(col, true)
	}
	return nil, next, true
}

// blockNode reads a mapping or sequence at column col, p at its first
// byte.
func (s *yamlScanner) blockNode(col int) (any, int, bool) {
	if s.isSeqEntry() {
		return s.blockSequence(col, false)
	}
	if _, _, ok := s.keyAt(); ok {
		return s.blockMapping(col)
	}
	return nil, 0, false
}

// blockSequence reads the entries of a sequence at column col, p at its
// first "-". A compact sequence sits at its key's column and ends at the
// mapping's next key.
func (s *yamlScanner) blockSequence(col int, compact bool) ([]any, int, bool) {
	if !s.enter() {
		return nil, 0, false
	}
	defer func() { s.depth-- }()
	items := []any{}
	for {
		s.p++ // the '-'
		for s.at() == ' ' {
			s.p++
		}
		var v any
		var next int
		var ok bool
		switch c := s.at(); {
		case c == 0 || c == '\n' || c == '#':
			if !s.endLine() {
				return nil, 0, false
			}
			next, ok = s.nextLine(), true
			if next > col {
				v, next, ok = s.blockNode(next)
			}
		case s.isSeqEntry():
			return nil, 0, false
		default:
			if _, _, isKey := s.keyAt(); isKey {
				v, next, ok = s.blockMapping(s.col())
			} else {
				v, next, ok = s.inlineValue(col)
			}
		}
		if !ok {
			return nil, 0, false
		}
		items = append(items, v)
		switch {
		case next == col && s.isSeqEntry():
			continue
		case next < col, next == col && compact:
			return items, next, true
		}
		return nil, 0, false
	}
}

// inlineValue reads a value that starts on its key's or dash's line, p at
// its first byte, for a collection at column col, and returns it with the
// indentation of the next line.
func (s *yamlScanner) inlineValue(col int) (any, int, bool) {
	var v any
	var ok bool
	switch s.at() {
	case '|':
		return s.literal(col)
	case '{', '[', '"', '\'':
		v, ok = s.flowNode()
	default:
		v, ok = s.blockPlain()
	}
	if !ok || !s.endLine() {
		return nil, 0, false
	}
	return v, s.nextLine(), true
}

// isIndicator is whether a plain scalar cannot start with c (or this
// scanner does not take one that does).
func isIndicator(c byte) bool {
	switch c {
	case '-', '?', ':', ',', '[', ']', '{', '}', '#', '&', '*', '!', '|', '>', '\'', '"', '%', '@', '`', ' ':
		return true
	}
	return false
}

// blockPlain reads a plain scalar of block context up to a comment or
// the line's end.
func (s *yamlScanner) blockPlain() (any, bool) {
	start := s.p
	if isIndicator(s.at()) {
		return nil, false
	}
	end := start
	for s.p < len(s.src) {
		c := s.src[s.p]
		if c == '\n' {
			break
		}
		if c == '#' && s.src[s.p-1] == ' ' {
			break
		}
		if c == ':' && (s.p+1 == len(s.src) || s.src[s.p+1] == ' ' || s.src[s.p+1] == '\n') {
			return nil, false
		}
		s.p++
		if c != ' ' {
			end = s.p
		}
	}
	return plainValue(string(s.src[start:end]))
}

// flowNode reads a flow mapping, flow sequence, quoted or plain scalar
// in flow context, p at its first byte; all on one line.
func (s *yamlScanner) flowNode() (any, bool) {
	switch s.at() {
	case '{':
		return s.flowMapping()
	case '[':
		return s.flowSequence()
	case '"', '\'':
		return s.quoted()
	}
	start := s.p
	if isIndicator(s.at()) {
		return nil, false
	}
	end := start
loop:
	for s.p < len(s.src) {
		switch c := s.src[s.p]; c {
		case ',', ']', '}':
			break loop
		case '\n', ':', '#', '[', '{':
			return nil, false
		case ' ':
			s.p++
		default:
			s.p++
			end = s.p
		}
	}
	return plainValue(string(s.src[start:end]))
}

func (s *yamlScanner) skipSpaces() {
	for s.at() == ' ' {
		s.p++
	}
}

// flowMapping reads {key: value, ...} with plain keys, p at the '{'.
func (s *yamlScanner) flowMapping() (any, bool) {
	if !s.enter() {
		return nil, false
	}
	defer func() { s.depth-- }()
	s.p++
	m := map[any]any{}
	s.skipSpaces()
	if s.at() == '}' {
		s.p++
		return m, true
	}
	for {
		s.skipSpaces()
		key, after, ok := s.keyAt()
		if !ok || !stringKey(key) || after >= len(s.src) || s.src[after] != ' ' {
			return nil, false
		}
		if _, dup := m[key]; dup {
			return nil, false
		}
		s.p = after
		s.skipSpaces()
		v, ok := s.flowNode()
		if !ok {
			return nil, false
		}
		m[key] = v
		s.skipSpaces()
		switch s.at() {
		case ',':
			s.p++
			s.skipSpaces()
			if s.at() == '}' {
				return nil, false
			}
		case '}':
			s.p++
			return m, true
		default:
			return nil, false
		}
	}
}

// flowSequence reads [value, ...], p at the '['.
func (s *yamlScanner) flowSequence() (any, bool) {
	if !s.enter() {
		return nil, false
	}
	defer func() { s.depth-- }()
	s.p++
	items := []any{}
	s.skipSpaces()
	if s.at() == ']' {
		s.p++
		return items, true
	}
	for {
		s.skipSpaces()
		v, ok := s.flowNode()
		if !ok {
			return nil, false
		}
		items = append(items, v)
		s.skipSpaces()
		switch s.at() {
		case ',':
			s.p++
			s.skipSpaces()
			if s.at() == ']' {
				return nil, false
			}
		case ']':
			s.p++
			return items, true
		default:
			return nil, false
		}
	}
}

// quoted reads a quoted scalar on one line: single-quoted with ” for a
// quote, double-quoted without escapes.
func (s *yamlScanner) quoted() (any, bool) {
	q := s.at()
	s.p++
	start := s.p
	var buf []byte // only when a single-quoted scalar holds ''
	for s.p < len(s.src) {
		c := s.src[s.p]
		switch {
		case c == '\n' || c == '\\' && q == '"':
			return nil, false
		case c == q && q == '\'' && s.p+1 < len(s.src) && s.src[s.p+1] == '\'':
			buf = append(buf, s.src[start:s.p+1]...)
			s.p += 2
			start = s.p
			continue
		case c == q:
			v := string(s.src[start:s.p])
			if buf != nil {
				v = string(buf) + v
			}
			s.p++
			return v, true
		}
		s.p++
	}
	return nil, false
}

// literal reads a literal block scalar ("|" or "|-") of a collection at
// column col, p at the '|', and returns it with the indentation of the
// line after it. Its indentation is its first line's, which must be
// deeper than col; it ends before the first line with less, and every
// line of it ends with a line break.
func (s *yamlScanner) literal(col int) (any, int, bool) {
	s.p++
	strip := false
	if s.at() == '-' {
		strip = true
		s.p++
	}
	if c := s.at(); c != ' ' && c != '\n' || !s.endLine() || s.p == len(s.src) || s.src[s.p-1] != '\n' {
		return nil, 0, false
	}
	indent := -1
	var buf []byte
	blank := 0 // empty lines not yet known to be inside
	for s.p < len(s.src) {
		s.line = s.p
		for s.p < len(s.src) && s.src[s.p] == ' ' {
			s.p++
		}
		n := s.p - s.line
		if c := s.at(); c == '\n' || c == 0 {
			if indent < 0 || n > indent || c == 0 {
				return nil, 0, false
			}
			blank++
			s.p++
			continue
		}
		if indent < 0 {
			if n <= col {
				return nil, 0, false
			}
			indent = n
		}
		if n < indent {
			s.p = s.line
			break
		}
		for ; blank > 0; blank-- {
			buf = append(buf, '\n')
		}
		s.p = s.line + indent
		start := s.p
		for s.p < len(s.src) && s.src[s.p] != '\n' {
			s.p++
		}
		if s.p == len(s.src) {
			return nil, 0, false
		}
		buf = append(buf, s.src[start:s.p]...)
		buf = append(buf, '\n')
		s.p++
	}
	if indent < 0 {
		return nil, 0, false
	}
	if strip {
		buf = buf[:len(buf)-1]
	}
	return string(buf), s.nextLine(), true
}
