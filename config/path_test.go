package config

import (
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"testing"
)

func TestNormalizePath(t *testing.T) {
	keep := PathOptions{EscapedSlashes: EscapedSlashKeep}
	unescape := PathOptions{EscapedSlashes: EscapedSlashUnescape}
	noMerge := PathOptions{KeepEmptySegments: true}
	for _, tc := range []struct {
		in   string
		opts PathOptions
		want string // "" for an error
	}{
		{"/", PathOptions{}, "/"},
		{"/pub/file.txt", PathOptions{}, "/pub/file.txt"},
		{"/pub/../admin/secret.txt", PathOptions{}, "/admin/secret.txt"},
		{"/pub/%2e%2e/admin", PathOptions{}, "/admin"},
		{"/pub/.%2E/admin", PathOptions{}, "/admin"},
		{"/pub/%2E/x", PathOptions{}, "/pub/x"},
		{"/a/b/c/./../../g", PathOptions{}, "/a/g"},
		{"/a/b/..", PathOptions{}, "/a/"},
		{"/a/.", PathOptions{}, "/a/"},
		{"/..", PathOptions{}, "/"},
		{"/../../x", PathOptions{}, "/x"},
		{"/a//b", PathOptions{}, "/a/b"},
		{"//admin", PathOptions{}, "/admin"},
		{"/a//", PathOptions{}, "/a/"},
		{"/a//../b", PathOptions{}, "/b"},
		{"/a//b", noMerge, "/a//b"},
		{"/a//../b", noMerge, "/a/b"},
		{"/%7Euser/%41b", PathOptions{}, "/~user/Ab"},
		{"/a%2fb", PathOptions{}, ""},
		{"/a%5Cb", PathOptions{}, ""},
		{"/a\\b", PathOptions{}, ""},
		{"/a%2fb", keep, "/a%2Fb"},
		{"/pub/..%2fadmin", keep, "/pub/..%2Fadmin"},
		{"/a\\b", keep, "/a%5Cb"},
		{"/pub/..%2fadmin", unescape, "/admin"},
		{"/pub/..%5c..%5cadmin", unescape, "/admin"},
		{"/pub\\..\\admin", unescape, "/admin"},
		{"/pub/..;/admin", PathOptions{}, ""},
		{"/pub/.;x/admin", PathOptions{}, ""},
		{"/pub/..%3b/admin", PathOptions{}, ""},
		{"/pub/%2e%2e;/admin", PathOptions{}, ""},
		{"/pub/a;b/c", PathOptions{}, "/pub/a;b/c"},
		{"/pub/...;/c", PathOptions{}, "/pub/...;/c"},
		{"/pub/%252e%252e/admin", PathOptions{}, ""},
		{"/pub/%25%32%65/admin", PathOptions{}, ""},
		{"/pub/%252f", PathOptions{}, ""},
		{"/pub/%252e", keep, "/pub/%252e"},
		{"/pub/%2541", PathOptions{}, "/pub/%2541"},
		{"/a%00b", PathOptions{}, ""},
		{"/a%zz", PathOptions{}, ""},
		{"/a%2", PathOptions{}, ""},
		{"/a%c3%a9", PathOptions{}, "/a%C3%A9"},
		{"/a\xc3\xa9", PathOptions{}, "/a%C3%A9"},
		{"/a b#c", PathOptions{}, "/a%20b%23c"},
		{"/a:b@c!$&'()*+,;=", PathOptions{}, "/a:b@c!$&'()*+,;="},
		{"a/b", PathOptions{}, ""},
		{"", PathOptions{}, ""},
	} {
		got, err := NormalizePath(tc.in, tc.opts)
		if tc.want == "" {
			if err == nil || !errors.Is(err, ErrAmbiguousPath) {
				t.Errorf("NormalizePath(%q, %+v) = %q, %v; want an ErrAmbiguousPath", tc.in, tc.opts, got, err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("NormalizePath(%q, %+v) = %q, %v; want %q", tc.in, tc.opts, got, err, tc.want)
		}
	}
}

// TestNormalPathDoesNotAllocate: a path already in normal form costs a scan.
func TestNormalPathDoesNotAllocate(t *testing.T) {
	for _, p := range []string{"/", "/pub/file.txt", "/a%20b/c%C3%A9/", "/api/v1/users;x=1"} {
		if n := testing.AllocsPerRun(100, func() {
			if got, _ := NormalizePath(p, PathOptions{}); got != p {
				t.Fatalf("%q changed to %q", p, got)
			}
		}); n != 0 {
			t.Errorf("NormalizePath(%q): %v allocations", p, n)
		}
	}
}

var (
	refDoubleEncoded = regexp.MustCompile(`%25(2[EeFf]|5[Cc])`)
	refSlashes       = regexp.MustCompile(`/+`)
	refDotParams     = regexp.MustCompile(`^\.\.?(;|%3[Bb])`)
)

// refNormalize is NormalizePath written the slow, obvious way: one token
// per input character or escape, then the steps one after the other on
// whole strings, with RFC 3986 section 5.2.4 as the RFC writes it.
func refNormalize(p string, o PathOptions) (string, bool) {
	if !strings.HasPrefix(p, "/") {
		return "", false
	}
	const unreserved = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._~"
	var b strings.Builder
	slash := func(c byte) bool {
		switch o.EscapedSlashes {
		case EscapedSlashKeep:
			b.WriteString(map[byte]string{'/': "%2F", '\\': "%5C"}[c])
		case EscapedSlashUnescape:
			b.WriteByte('/')
		default:
			return false
		}
		return true
	}
	for i := 0; i < len(p); i++ {
		c := p[i]
		switch {
		case c == '%':
			if i+2 >= len(p) {
				return "", false
			}
			v, err := url.PathUnescape(p[i : i+3])
			if err != nil || v[0] == 0 {
				return "", false
			}
			switch {
			case v[0] == '/' || v[0] == '\\':
				if !slash(v[0]) {
					return "", false
				}
			case strings.IndexByte(unreserved, v[0]) >= 0:
				b.WriteByte(v[0])
			default:
				b.WriteString(strings.ToUpper(p[i : i+3]))
			}
			i += 2
		case c == '\\':
			if !slash(c) {
				return "", false
			}
		case c == 0:
			return "", false
		case strings.IndexByte(unreserved+"!$&'()*+,;=:@/", c) >= 0:
			b.WriteByte(c)
		default:
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	s := b.String()
	if o.EscapedSlashes != EscapedSlashKeep && refDoubleEncoded.MatchString(s) {
		return "", false
	}
	if !o.KeepEmptySegments {
		s = refSlashes.ReplaceAllString(s, "/")
	}
	for _, seg := range strings.Split(s, "/") {
		if refDotParams.MatchString(seg) {
			return "", false
		}
	}
	out := ""
	for in := s; in != ""; {
		switch {
		case strings.HasPrefix(in, "/./"):
			in = in[2:]
		case in == "/.":
			in = "/"
		case strings.HasPrefix(in, "/../"):
			in = in[3:]
			out = out[:max(strings.LastIndexByte(out, '/'), 0)]
		case in == "/..":
			in = "/"
			out = out[:max(strings.LastIndexByte(out, '/'), 0)]
		default:
			j := strings.IndexByte(in[1:], '/') + 1
			if j == 0 {
				j = len(in)
			}
			out, in = out+in[:j], in[j:]
		}
	}
	if out == "" {
		out = "/"
	}
	return out, true
}

func FuzzNormalizePath(f *testing.F) {
	for _, seed := range []string{
		"/", "/pub/../admin", "/pub/%2e%2e/admin", "/a//b/./c/..", "/a%2fb", "/a\\b", "/..;/x", "/%252e",
		"/%25%32%65", "/a%c3%a9", "/a b", "//", "/.%2E/", "/x/%2E%2e%3b/", "/a%00", "/%7e",
	} {
		f.Add(seed, uint8(0))
	}
	f.Fuzz(func(t *testing.T, p string, mode uint8) {
		o := PathOptions{KeepEmptySegments: mode&4 != 0, EscapedSlashes: EscapedSlashAction(mode & 3 % 3)}
		got, err := NormalizePath(p, o)
		want, ok := refNormalize(p, o)
		if ok != (err == nil) || ok && got != want {
			t.Fatalf("NormalizePath(%q, %+v) = %q, %v; reference %q, %v", p, o, got, err, want, ok)
		}
		if err != nil {
			return
		}
		// The normal form is its own normal form, found by the scan alone.
		if !isNormalPath(got, o) {
			t.Fatalf("normal form %q of %q is not seen as normal", got, p)
		}
		if isNormalPath(p, o) && got != p {
			t.Fatalf("%q seen as normal but normalised to %q", p, got)
		}
		// Go sends exactly the normal form when it is the URL's RawPath.
		dec, err := url.PathUnescape(got)
		if err != nil {
			t.Fatalf("normal form %q: %v", got, err)
		}
		if u := (&url.URL{Path: dec, RawPath: got}); u.EscapedPath() != got {
			t.Fatalf("normal form %q is sent as %q", got, u.EscapedPath())
		}
	})
}

// BenchmarkNormalizePath is the cost per request of a path already in
// normal form (the scan alone) and of one that must be rewritten.
func BenchmarkNormalizePath(b *testing.B) {
	for _, p := range []string{"/", "/api/v1/users/12345/orders", "/static/a%20b/caf%C3%A9.png", "/api/v1/../v2/./users//x"} {
		b.Run(p, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := NormalizePath(p, PathOptions{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
