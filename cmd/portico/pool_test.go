package main

import (
	"fmt"
	"testing"
)

func TestParseAddressPool(t *testing.T) {
	cases := []struct {
		in      string
		want    string
		wantErr bool
	}{
		{"", "[]", false},
		{"10.0.0.5", "[10.0.0.5]", false},
		{"10.0.0.0/30", "[10.0.0.1 10.0.0.2]", false},
		{"10.0.0.8/31, 10.0.0.9", "[10.0.0.8 10.0.0.9]", false},
		{"10.0.0.1/32,fd00::1", "[10.0.0.1 fd00::1]", false},
		{"fd00::/126", "[fd00:: fd00::1 fd00::2 fd00::3]", false},
		{"10.0.0.0/8", "", true},
		{"not-an-ip", "", true},
	}
	for _, c := range cases {
		got, err := parseAddressPool(c.in)
		if (err != nil) != c.wantErr {
			t.Errorf("%q: error %v", c.in, err)
			continue
		}
		if !c.wantErr && fmt.Sprint(got) != c.want {
			t.Errorf("%q: %v, want %s", c.in, got, c.want)
		}
	}
}
