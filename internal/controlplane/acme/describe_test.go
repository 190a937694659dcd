package acme

import (
	"fmt"
	"strings"
	"testing"

	"github.com/mholt/acmez/v3/acme"
)

// TestDescribeErrorIsStable: two failures of the same kind, with different
// challenge tokens, give the same status text, and the CA's reason stays.
func TestDescribeErrorIsStable(t *testing.T) {
	fail := func(token string) error {
		return fmt.Errorf("app.portico.test: obtaining certificate: %w", acme.Problem{
			Type:   "urn:ietf:params:acme:error:connection",
			Status: 400,
			Detail: "127.0.0.3: Fetching http://app.portico.test:5002/.well-known/acme-challenge/" + token + ": connection refused",
		})
	}
	a, b := describeError(fail("tokenA123")), describeError(fail("tokenB456"))
	if a != b {
		t.Errorf("messages differ between retries:\n%s\n%s", a, b)
	}
	if !strings.HasPrefix(a, "connection: ") || !strings.Contains(a, "connection refused") || strings.Contains(a, "token") {
		t.Errorf("message %q", a)
	}
	if got := describeError(fmt.Errorf("dial https://acme.example/dir/x?y=1: timeout")); !strings.Contains(got, "https://acme.example/...") || strings.Contains(got, "dir/x") {
		t.Errorf("plain error: %q", got)
	}
}
