package h1

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"reflect"
	"sync"
	"testing"
)

// TestRequestURLAsParseRequestURI: over one kept-alive connection, the URL
// a handler gets for each target is what url.ParseRequestURI makes of it
// (origin form is split without it, see reqtarget), and every request's
// URL is its own: the URLs kept from earlier requests still hold their
// targets once the connection served the rest.
func TestRequestURLAsParseRequestURI(t *testing.T) {
	targets := []string{"/", "/a/b.c", "/a?", "/a?b", "/a?b?", "/?", "//x", "/a%20b", "/a%2fb", "/a%zz",
		"/é", "/a;b=c,d:e@f$g&h+i~j", "/a!b*c'(d)", "/a?x=%zz", "/a[b]", "/a|b", "/a\\b", "/a{b}", "/a\"b",
		"http://other.example/p?q", "*"}
	const alphabet = "/?%abAZ09-._~$&+,:;=@!*'()[]\x80\xff\"<>\\^`{|}2f"
	rng := rand.New(rand.NewPCG(5, 6))
	for range 400 {
		b := []byte{'/'}
		for range rng.IntN(12) {
			b = append(b, alphabet[rng.IntN(len(alphabet))])
		}
		targets = append(targets, string(b))
	}
	var mu sync.Mutex
	kept := map[string]*url.URL{}
	seen := map[string]url.URL{}
	addr, _ := serve(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		kept[r.RequestURI] = r.URL
		seen[r.RequestURI] = *r.URL
		mu.Unlock()
	}, nil)
	c := dial(t, addr)
	br := bufio.NewReader(c)
	for _, target := range targets {
		method := http.MethodGet
		if target == "*" {
			method = http.MethodOptions
		}
		fmt.Fprintf(c, "%s %s HTTP/1.1\r\nHost: a.example\r\n\r\n", method, target)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("%q: %v", target, err)
		}
		resp.Body.Close()
		want, err := url.ParseRequestURI(target)
		if err != nil {
			if resp.StatusCode != http.StatusBadRequest {
				t.Fatalf("%q: status %d for a target url.ParseRequestURI refuses", target, resp.StatusCode)
			}
			// A 400 closes the connection.
			c = dial(t, addr)
			br = bufio.NewReader(c)
			continue
		}
		if target == "*" {
			continue // answered by the server, no handler
		}
		mu.Lock()
		got := seen[target]
		mu.Unlock()
		if resp.StatusCode != http.StatusOK || !reflect.DeepEqual(&got, want) {
			t.Fatalf("%q: status %d, URL %#v, url.ParseRequestURI makes %#v", target, resp.StatusCode, got, *want)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for target, u := range kept {
		if want := seen[target]; !reflect.DeepEqual(*u, want) {
			t.Errorf("%q: kept URL became %#v, was %#v", target, *u, want)
		}
	}
}
