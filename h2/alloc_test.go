package h2

import (
	"math/rand/v2"
	"net/url"
	"reflect"
	"testing"
)

// TestParseRequestPath holds the split of a plain target to what
// url.ParseRequestURI makes of it, for targets of every kind: plain,
// escaped, with control bytes, queries, fragments and bytes past ASCII.
func TestParseRequestPath(t *testing.T) {
	targets := []string{"/", "/a/b.c", "/a?", "/a?b", "/a?b?", "/a??", "/?", "//x", "///x", "/a#f", "/a%20b",
		"/a%2fb", "/a%zz", "/a b", "/a\x7fb", "/a?b\x00", "/a?b c", "/é", "/a;b=c,d:e@f$g&h+i~j", "/a!b*c'(d)",
		"/a?x=%zz", "/a[b]", "/a|b", "/a\\b", "/a{b}", "/a^b`c", "/a\"b", "/a<b>"}
	const alphabet = "/?#%abAZ09-._~$&+,:;=@!*'()[] \x00\x1f\x7f\x80\xff\"<>\\^`{|}2f"
	rng := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		b := []byte{'/'}
		for range rng.IntN(12) {
			b = append(b, alphabet[rng.IntN(len(alphabet))])
		}
		targets = append(targets, string(b))
	}
	for _, target := range targets {
		want, wantErr := url.ParseRequestURI(target)
		var got url.URL
		err := parseRequestPath(&got, target)
		if (err != nil) != (wantErr != nil) {
			t.Fatalf("%q: error %v, url.ParseRequestURI's %v", target, err, wantErr)
		}
		if err == nil && !reflect.DeepEqual(&got, want) {
			t.Fatalf("%q: %#v, url.ParseRequestURI makes %#v", target, got, *want)
		}
	}
}

// TestRequestHeaderValues checks the header map whose values share one
// array: repeated names keep their order, and a handler that appends to
// or overwrites one field's values changes no other field.
func TestRequestHeaderValues(t *testing.T) {
	c := &conn{canon: map[string]string{}}
	h, err := c.requestHeader([]hpackField{{Name: "a", Value: "1"}, {Name: "b", Value: "2"}, {Name: "a", Value: "3"},
		{Name: "cookie", Value: "x=1"}, {Name: "c", Value: "4"}, {Name: "cookie", Value: "y=2"}})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{"A": {"1", "3"}, "B": {"2"}, "C": {"4"}, "Cookie": {"x=1; y=2"}}
	if !reflect.DeepEqual(map[string][]string(h), want) {
		t.Fatalf("header %v, want %v", h, want)
	}
	h["B"] = append(h["B"], "5")
	h.Add("C", "6")
	h["A"][0] = "7"
	want = map[string][]string{"A": {"7", "3"}, "B": {"2", "5"}, "C": {"4", "6"}, "Cookie": {"x=1; y=2"}}
	if !reflect.DeepEqual(map[string][]string(h), want) {
		t.Fatalf("header after the handler's changes %v, want %v", h, want)
	}
}
