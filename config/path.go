package config

import (
	"errors"
	"fmt"
	"strings"
)

// Request paths are normalised once, before any route sees them, and the
// normal form is both what routes match and what the backend receives: a
// backend that resolves "..", decodes "%2e" or merges slashes itself then
// finds nothing left to resolve, so it cannot see a path the routes did not.
//
// The normal form of an escaped path (RFC 3986):
//   - a percent-encoded unreserved character (ALPHA DIGIT - . _ ~) is
//     decoded, every other escape is kept with upper-case hex digits, and
//     a byte that may not appear in a path (space, '"', '#', '<', '>', '[',
//     ']', '^', '`', '{', '|', '}', non-ASCII) is percent-encoded;
//   - dot segments are removed (section 5.2.4), after the decoding, so
//     "%2e%2e" is "..";
//   - with merging (the default), empty segments are dropped: "//" is "/";
//   - an encoded slash or backslash (%2F, %5C) or a literal backslash is
//     rejected by default (EscapedSlashReject); see EscapedSlashAction;
//   - rejected: an invalid escape, %00 (or a NUL byte), a dot segment with path parameters
//     ("..;x", ".;x", which servlet containers resolve as ".." and "."),
//     and a double-encoded dot, slash or backslash ("%252e", "%252f",
//     "%255c"), which a backend that decodes twice would resolve.
//
// The query is not part of the path and is never changed.

// EscapedSlashAction says what happens to a path with an encoded slash or
// backslash (%2F, %5C) or a literal backslash, which backends disagree on:
// some decode them into separators before resolving dot segments, so
// "/pub/..%2fadmin" becomes "/admin" to them.
type EscapedSlashAction uint8

const (
	// EscapedSlashReject answers such a request with 400 (the default).
	EscapedSlashReject EscapedSlashAction = iota
	// EscapedSlashKeep keeps %2F and %5C as they are (upper-cased), as
	// characters of their segment for matching, and encodes a literal
	// backslash as %5C. Only safe with backends that never treat them as
	// separators; double-encoded forms pass too.
	EscapedSlashKeep
	// EscapedSlashUnescape turns %2F, %5C and a literal backslash into
	// "/" before dot segments are removed, so the backend gets plain
	// separators.
	EscapedSlashUnescape
)

var escapedSlashNames = [...]string{"reject", "keep", "unescape"}

func (a EscapedSlashAction) String() string {
	if int(a) < len(escapedSlashNames) {
		return escapedSlashNames[a]
	}
	return fmt.Sprintf("EscapedSlashAction(%d)", uint8(a))
}

// ParseEscapedSlashAction parses "reject", "keep" or "unescape".
func ParseEscapedSlashAction(s string) (EscapedSlashAction, error) {
	for i, n := range escapedSlashNames {
		if s == n {
			return EscapedSlashAction(i), nil
		}
	}
	return 0, fmt.Errorf("escaped slash action %q: want one of %s", s, strings.Join(escapedSlashNames[:], ", "))
}

// PathOptions are the choices of path normalisation; the zero value is the
// default.
type PathOptions struct {
	// KeepEmptySegments leaves repeated slashes as they are instead of
	// merging them. A backend that merges them itself can then see
	// "//admin" as "/admin" where routes saw an empty first segment.
	KeepEmptySegments bool
	EscapedSlashes    EscapedSlashAction
}

// ErrAmbiguousPath is wrapped by every error NormalizePath returns: the path
// cannot be given one meaning that every backend agrees with.
var ErrAmbiguousPath = errors.New("ambiguous request path")

// NormalizePath returns the normal form of the escaped path p (the request
// target up to '?'), which must start with '/'. A path already in normal
// form is returned as it is, without allocating.
func NormalizePath(p string, o PathOptions) (string, error) {
	if p == "" || p[0] != '/' {
		return "", fmt.Errorf("%w: %q does not start with '/'", ErrAmbiguousPath, p)
	}
	if isNormalPath(p, o) {
		return p, nil
	}
	c, err := canonicalBytes(p, o.EscapedSlashes, true)
	if err != nil {
		return "", err
	}
	return removeDotSegments(c, !o.KeepEmptySegments)
}

// CanonicalPathValue is the form of a path value from a route (a match, a
// rewrite or a redirect) that requests are compared with: escapes are
// normalised as in NormalizePath, but nothing is rejected for its meaning
// and no segment is removed; only an invalid escape is an error.
func CanonicalPathValue(v string) (string, error) {
	c, err := canonicalBytes(v, EscapedSlashKeep, false)
	if err != nil {
		return "", err
	}
	return string(c), nil
}

// isNormalPath reports, without allocating, whether p is its own normal
// form: the common case, which then costs one scan.
func isNormalPath(p string, o PathOptions) bool {
	seg := 1 // start of the current segment
	for i := 1; i <= len(p); i++ {
		if i == len(p) || p[i] == '/' {
			s := p[seg:i]
			if s == "" && i < len(p) && !o.KeepEmptySegments || isDotSegment(s) || hasDotParams(s) {
				return false
			}
			seg = i + 1
			continue
		}
		switch c := p[i]; {
		case c == '%':
			if i+2 >= len(p) || !isUpperHex(p[i+1]) || !isUpperHex(p[i+2]) {
				return false
			}
			switch b := unhex(p[i+1])<<4 | unhex(p[i+2]); {
			case b == 0 || isUnreserved(b):
				return false
			case (b == '/' || b == '\\' || b == '%' && isDoubleEncoded(p[i+3:])) && o.EscapedSlashes != EscapedSlashKeep:
				return false
			}
			i += 2
		case !isPathLiteral(c):
			return false
		}
	}
	return true
}

// canonicalBytes normalises the escapes of p (see NormalizePath). With
// strict, what NormalizePath rejects is an error and slashes are handled
// by action; without, only invalid escapes are errors.
func canonicalBytes(p string, action EscapedSlashAction, strict bool) ([]byte, error) {
	const hexDigits = "0123456789ABCDEF"
	out := make([]byte, 0, len(p)+8)
	escape := func(b byte) { out = append(out, '%', hexDigits[b>>4], hexDigits[b&15]) }
	slash := func(b byte) error {
		switch {
		case !strict || action == EscapedSlashKeep:
			escape(b)
		case action == EscapedSlashUnescape:
			out = append(out, '/')
		default:
			return fmt.Errorf("%w: encoded slash or backslash", ErrAmbiguousPath)
		}
		return nil
	}
	for i := 0; i < len(p); i++ {
		c := p[i]
		switch {
		case c == '%':
			if i+2 >= len(p) || !isHex(p[i+1]) || !isHex(p[i+2]) {
				return nil, fmt.Errorf("%w: invalid escape at byte %d", ErrAmbiguousPath, i)
			}
			b := unhex(p[i+1])<<4 | unhex(p[i+2])
			i += 2
			switch {
			case isUnreserved(b):
				out = append(out, b)
			case b == '/' || b == '\\':
				if err := slash(b); err != nil {
					return nil, err
				}
			case b == 0 && strict:
				return nil, fmt.Errorf("%w: %%00", ErrAmbiguousPath)
			default:
				escape(b)
			}
		case c == '\\':
			if err := slash(c); err != nil {
				return nil, err
			}
		case isPathLiteral(c):
			out = append(out, c)
		case c == 0 && strict:
			return nil, fmt.Errorf("%w: NUL", ErrAmbiguousPath)
		default:
			escape(c)
		}
	}
	if strict && action != EscapedSlashKeep {
		// Checked on the result: "%25%32%65" is "%252e" once its
		// unreserved escapes are decoded.
		for i := 0; i+2 < len(out); i++ {
			if out[i] == '%' && out[i+1] == '2' && out[i+2] == '5' && isDoubleEncoded(string(out[i+3:])) {
				return nil, fmt.Errorf("%w: double-encoded dot or separator", ErrAmbiguousPath)
			}
		}
	}
	return out, nil
}

// removeDotSegments resolves the dot segments of the canonical path c
// (which starts with '/'), dropping empty segments but the last one when
// merge is set. A dot segment followed by path parameters is an error.
func removeDotSegments(c []byte, merge bool) (string, error) {
	// Segments kept so far, as start/end offsets into c.
	var kept [][2]int
	for start := 1; start <= len(c); {
		end := start
		for end < len(c) && c[end] != '/' {
			end++
		}
		s := string(c[start:end])
		last := end == len(c)
		switch {
		case hasDotParams(s):
			return "", fmt.Errorf("%w: dot segment with parameters", ErrAmbiguousPath)
		case s == "..":
			if len(kept) > 0 {
				kept = kept[:len(kept)-1]
			}
			fallthrough
		case s == ".":
			if last {
				kept = append(kept, [2]int{end, end}) // the trailing slash stays
			}
		case s == "" && merge && !last:
		default:
			kept = append(kept, [2]int{start, end})
		}
		start = end + 1
	}
	var b strings.Builder
	b.Grow(len(c))
	for _, k := range kept {
		b.WriteByte('/')
		b.Write(c[k[0]:k[1]])
	}
	if b.Len() == 0 {
		return "/", nil
	}
	return b.String(), nil
}

func isDotSegment(s string) bool { return s == "." || s == ".." }

// hasDotParams reports whether s is "." or ".." followed by path parameters
// (';', possibly encoded as %3B).
func hasDotParams(s string) bool {
	rest, ok := strings.CutPrefix(s, ".")
	if !ok {
		return false
	}
	rest = strings.TrimPrefix(rest, ".")
	return strings.HasPrefix(rest, ";") || strings.HasPrefix(rest, "%3B") || strings.HasPrefix(rest, "%3b")
}

// isDoubleEncoded reports whether s, which follows "%25", starts with the
// hex digits of a dot, slash or backslash.
func isDoubleEncoded(s string) bool {
	if len(s) < 2 {
		return false
	}
	switch s[0] {
	case '2':
		return s[1] == 'E' || s[1] == 'e' || s[1] == 'F' || s[1] == 'f'
	case '5':
		return s[1] == 'C' || s[1] == 'c'
	}
	return false
}

func isUnreserved(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
		c == '-' || c == '.' || c == '_' || c == '~'
}

// isPathLiteral reports whether c may appear unescaped in a normal path:
// unreserved, sub-delims, ':', '@' and '/'.
func isPathLiteral(c byte) bool {
	if isUnreserved(c) {
		return true
	}
	switch c {
	case '!', '$', '&', '\'', '(', ')', '*', '+', ',', ';', '=', ':', '@', '/':
		return true
	}
	return false
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func isUpperHex(c byte) bool { return '0' <= c && c <= '9' || 'A' <= c && c <= 'F' }

func unhex(c byte) byte {
	switch {
	case c <= '9':
		return c - '0'
	case c >= 'a':
		return c - 'a' + 10
	}
	return c - 'A' + 10
}
