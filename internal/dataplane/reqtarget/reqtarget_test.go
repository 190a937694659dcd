package reqtarget

import (
	"math/rand/v2"
	"net/url"
	"reflect"
	"testing"
)

// TestParse holds the split of a plain target to what
// url.ParseRequestURI makes of it, for targets of every kind: plain,
// escaped, with control bytes, queries, fragments and bytes past ASCII.
func TestParse(t *testing.T) {
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
		err := Parse(&got, target)
		if (err != nil) != (wantErr != nil) {
			t.Fatalf("%q: error %v, url.ParseRequestURI's %v", target, err, wantErr)
		}
		if err == nil && !reflect.DeepEqual(&got, want) {
			t.Fatalf("%q: %#v, url.ParseRequestURI makes %#v", target, got, *want)
		}
	}
}
