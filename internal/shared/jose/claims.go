package jose

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
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

// ParseClaims decodes a token's payload, a JSON object.
func ParseClaims(payload []byte) (Claims, error) {
	var c Claims
	if err := json.Unmarshal(payload, &c); err != nil || c == nil {
		return nil, ErrMalformed
	}
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
	if _, present := c["nbf"]; present {
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
