package config

import (
	"net/url"
	"testing"
)

// queryValue must agree with url.ParseQuery on the first value of a key.
func TestQueryValueAgreesWithParseQuery(t *testing.T) {
	raws := []string{
		"", "a", "a=", "a=1", "a=1&a=2", "b=1&a=2", "a=%zz&a=3", "%61=4", "a=x+y", "a=1;a=2&a=3",
		"&&a=5", "=&a=6", "a%3Db=7", "a=%E2%82%AC",
	}
	for _, raw := range raws {
		for _, key := range []string{"a", "b", "a=b"} {
			want, _ := url.ParseQuery(raw)
			vals, wantOK := want[key]
			got, ok := queryValue(raw, key)
			if ok != wantOK || (ok && got != vals[0]) {
				t.Errorf("queryValue(%q, %q) = %q, %v; ParseQuery gives %q", raw, key, got, ok, vals)
			}
		}
	}
}
