package jose

import (
	"encoding/json/v2"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Expect is what CheckClaims asks of a token's claims.
type Expect struct {
	Issuer string
	// Audiences: the token's "aud" must hold one of them; none: "aud" is
	// not checked.
	Audiences []string
	Now       time.Time
	// Skew is the clock difference tolerated on "exp" and "nbf".
	Skew time.Duration
}

// Claims are a token's claims, decoded.
type Claims map[string]any

// ParseClaims decodes a token's payload, a JSON object: every claim. A
// name given twice, or text that is not UTF-8, makes it malformed (which
// of two values a backend would read is not guessed).
func ParseClaims(payload []byte) (Claims, error) {
	var c Claims
	if err := json.Unmarshal(payload, &c); err != nil || c == nil {
		return nil, ErrMalformed
	}
	return c, nil
}

// ParseRegistered decodes only the claims CheckClaims reads ("iss",
// "exp", "nbf", "aud"), skipping the others' values: for a policy that
// reads no other claim, a third of ParseClaims' work. It refuses what
// ParseClaims refuses.
func ParseRegistered(payload []byte) (Claims, error) {
	var r struct {
		Iss any `json:"iss"`
		Exp any `json:"exp"`
		Nbf any `json:"nbf"`
		Aud any `json:"aud"`
	}
	if err := json.Unmarshal(payload, &r); err != nil {
		return nil, ErrMalformed
	}
	c := make(Claims, 4)
	set := func(name string, v any) {
		if v != nil {
			c[name] = v
		}
	}
	set("iss", r.Iss)
	set("exp", r.Exp)
	set("nbf", r.Nbf)
	set("aud", r.Aud)
	return c, nil
}

// Issuer is the "iss" claim, "" when there is none.
func (c Claims) Issuer() string {
	s, _ := c["iss"].(string)
	return s
}

// Expiry is the "exp" claim; false when it is missing or not a number.
func (c Claims) Expiry() (time.Time, bool) { return c.time("exp") }

// IssuedAt is the "iat" claim, if it is a number.
func (c Claims) IssuedAt() (time.Time, bool) { return c.time("iat") }

func (c Claims) time(name string) (time.Time, bool) {
	f, ok := c[name].(float64)
	if !ok || math.IsNaN(f) || math.IsInf(f, 0) || f < 0 || f > 1<<40 {
		return time.Time{}, false
	}
	return time.Unix(int64(f), 0), true
}

// Errors of CheckClaims.
var (
	ErrExpired  = errors.New("token is expired")
	ErrNotYet   = errors.New("token is not valid yet")
	ErrIssuer   = errors.New("token's issuer is not the provider's")
	ErrAudience = errors.New("token's audience is not one of the provider's")
	ErrNoExpiry = errors.New("token has no expiry")
)

// CheckClaims checks "iss", "exp" (required), "nbf" and "aud".
func (c Claims) CheckClaims(e Expect) error {
	if c.Issuer() != e.Issuer {
		return ErrIssuer
	}
	exp, ok := c.Expiry()
	if !ok {
		return ErrNoExpiry
	}
	if !e.Now.Before(exp.Add(e.Skew)) {
		return ErrExpired
	}
	if v, present := c["nbf"]; present && v != nil {
		nbf, ok := c.time("nbf")
		if !ok {
			return fmt.Errorf("%w: nbf", ErrMalformed)
		}
		if e.Now.Add(e.Skew).Before(nbf) {
			return ErrNotYet
		}
	}
	if len(e.Audiences) > 0 {
		found := false
		for _, a := range c.Strings("aud") {
			for _, want := range e.Audiences {
				if a == want {
					found = true
				}
			}
		}
		if !found {
			return ErrAudience
		}
	}
	return nil
}

// Strings is a claim as a list of strings: a string is a list of one, an
// array its string elements; anything else none.
func (c Claims) Strings(name string) []string {
	switch v := c[name].(type) {
	case string:
		return []string{v}
	case []any:
		out := make([]string, 0, len(v))
		for _, x := range v {
			if s, ok := x.(string); ok {
				out = append(out, s)
			}
		}
		return out
	}
	return nil
}

// MaxClaimPath bounds the names of a claim path.
const MaxClaimPath = 8

// ParseClaimPath reads the path of a claim, nested in objects: names
// separated by ".", as "realm_access.roles" is the "roles" member of the
// "realm_access" claim. A "." or "\" that is part of a name is written
// with a "\" before it: `https://example\.com/roles` is the one claim of
// that name. No name is empty.
func ParseClaimPath(s string) ([]string, error) {
	var path []string
	var cur []byte
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '\\':
			if i+1 == len(s) || (s[i+1] != '.' && s[i+1] != '\\') {
				return nil, fmt.Errorf("claim path %q: a \"\\\" must come before a \".\" or \"\\\"", s)
			}
			i++
			cur = append(cur, s[i])
		case '.':
			if len(cur) == 0 {
				return nil, fmt.Errorf("claim path %q: an empty name", s)
			}
			path = append(path, string(cur))
			cur = cur[:0]
		default:
			cur = append(cur, c)
		}
	}
	if len(cur) == 0 {
		return nil, fmt.Errorf("claim path %q: an empty name", s)
	}
	path = append(path, string(cur))
	if len(path) > MaxClaimPath {
		return nil, fmt.Errorf("claim path %q: more than %d names", s, MaxClaimPath)
	}
	return path, nil
}

// Lookup is the claim at path (ParseClaimPath), through nested objects;
// false when a name along it is missing or not an object's member.
func (c Claims) Lookup(path []string) (any, bool) {
	var v any = map[string]any(c)
	for _, name := range path {
		obj, ok := v.(map[string]any)
		if !ok {
			return nil, false
		}
		if v, ok = obj[name]; !ok {
			return nil, false
		}
	}
	return v, v != nil
}

// Matches reports whether a claim's value v holds want: a string equal
// to it; a number equal to it read as a number ("1" and "1.0" match 1);
// a boolean named by it ("true", "false"); an array with an element that
// does. An object or null matches nothing.
func Matches(v any, want string) bool {
	switch x := v.(type) {
	case string:
		return x == want
	case float64:
		f, err := strconv.ParseFloat(want, 64)
		return err == nil && f == x
	case bool:
		return want == strconv.FormatBool(x)
	case []any:
		for _, e := range x {
			if _, nested := e.([]any); !nested && Matches(e, want) {
				return true
			}
		}
	}
	return false
}

// Text is a claim's value as text: a string as it is, a number in its
// shortest decimal form (never an exponent for an integer below 2^53),
// a boolean "true" or "false", an array of those joined by ","; false
// for null, an object, or an array holding one (or another array).
func Text(v any) (string, bool) {
	switch x := v.(type) {
	case string:
		return x, true
	case float64:
		if x == math.Trunc(x) && math.Abs(x) < 1<<53 {
			return strconv.FormatInt(int64(x), 10), true
		}
		return strconv.FormatFloat(x, 'g', -1, 64), true
	case bool:
		return strconv.FormatBool(x), true
	case []any:
		var b strings.Builder
		for i, e := range x {
			if _, nested := e.([]any); nested {
				return "", false
			}
			s, ok := Text(e)
			if !ok {
				return "", false
			}
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(s)
		}
		return b.String(), true
	}
	return "", false
}
