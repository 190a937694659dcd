package translate

import (
	"path/filepath"
	"slices"
	"testing"
)

// TestScopeTrustBundles: a Gateway's own data plane is sent only the
// ClusterTrustBundles its client certificate validation and the
// BackendTLSPolicies of its Services name, so that a bundle of no concern
// to it neither reaches it nor makes it rebuild when rotated.
func TestScopeTrustBundles(t *testing.T) {
	_, res := loadGolden(t, filepath.Join(goldenDir, "clustertrustbundle.in.yaml"))
	if len(res.ClusterTrustBundles) != 3 {
		t.Fatalf("%d bundles in the case, want 3", len(res.ClusterTrustBundles))
	}
	scoped := Scope(res, nn("infra", "gw"))
	var names []string
	for _, b := range scoped.ClusterTrustBundles {
		names = append(names, b.Name)
	}
	slices.Sort(names)
	if want := []string{"client-ca", "example.com:backends:v1"}; !slices.Equal(names, want) {
		t.Errorf("scoped bundles %q, want %q", names, want)
	}
}
