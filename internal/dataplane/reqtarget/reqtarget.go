// Package reqtarget parses the target of a request in origin form (a path
// and a query) into a url.URL as url.ParseRequestURI does, without its copy
// of the URL for the targets nearly every request has: Portico's HTTP/1 and
// HTTP/2 servers hold the URL with the request and parse into it.
package reqtarget

import (
	"net/url"
	"strings"
)

// Parse sets u to the URL of a request target in origin form
// (path[0] is '/'), as url.ParseRequestURI makes it. A path of plain
// characters with a query of printable ones, what nearly every request
// has, is split here without the parser's copy of the URL.
func Parse(u *url.URL, path string) error {
	p, q, hasQuery := strings.Cut(path, "?")
	plain := true
	for i := 0; i < len(p) && plain; i++ {
		plain = plainPathByte(p[i])
	}
	for i := 0; i < len(q) && plain; i++ {
		plain = q[i] >= ' ' && q[i] != 0x7f
	}
	if !plain {
		v, err := url.ParseRequestURI(path)
		if err != nil {
			return err
		}
		*u = *v
		return nil
	}
	*u = url.URL{Path: p, RawQuery: q, ForceQuery: hasQuery && q == ""}
	return nil
}

// plainPathByte tells whether c stands in a URL path as it is: neither
// unescaped nor escaped by net/url, so that Path is the text and RawPath
// is empty.
func plainPathByte(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	switch c {
	case '-', '_', '.', '~', '$', '&', '+', ',', '/', ':', ';', '=', '@':
		return true
	}
	return false
}
