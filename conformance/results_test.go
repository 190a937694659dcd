package conformance

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/sets"
	"sigs.k8s.io/gateway-api/conformance/utils/suite"
	"sigs.k8s.io/gateway-api/pkg/features"
)

func TestTableCountsPerFeature(t *testing.T) {
	p := suite.GatewayHTTPConformanceProfile
	ran := []TestResult{
		{Name: "Core1", Features: []features.FeatureName{features.SupportGateway, features.SupportHTTPRoute}, Outcome: Passed},
		{Name: "Core2", Features: []features.FeatureName{features.SupportGateway, features.SupportReferenceGrant}, Outcome: Failed},
		{Name: "Core3", Features: []features.FeatureName{features.SupportGateway}, Outcome: Skipped, Reason: "needs a thing"},
		{Name: "LS1", Features: []features.FeatureName{features.SupportGateway, features.SupportListenerSet}, Outcome: Passed},
		{Name: "LS2", Features: []features.FeatureName{features.SupportGateway, features.SupportListenerSet, features.SupportHTTPRoute}, Outcome: Passed},
		{Name: "Mirror2", Features: []features.FeatureName{features.SupportHTTPRouteRequestMirror, features.SupportHTTPRouteRequestMultipleMirrors}, Outcome: Skipped, Reason: "not claimed"},
		{Name: "TLSRoute", Features: []features.FeatureName{features.SupportGateway, features.SupportTLSRoute}, Outcome: Failed},
	}
	claimed := sets.New(features.SupportListenerSet)
	notClaimed := map[features.FeatureName]string{features.SupportHTTPRouteRequestMirror: "no mirrors"}
	rows := Table(p, ran, claimed, notClaimed)
	byName := map[string]Row{}
	for _, r := range rows {
		byName[r.Name] = r
	}
	if got := byName["GATEWAY-HTTP core"]; got.Counts != (Counts{1, 1, 1}) || !strings.Contains(got.Note, "Core3: needs a thing") {
		t.Errorf("core row = %+v, want 1/1/1 with Core3's reason", got)
	}
	if got := byName["ListenerSet"]; got.Counts != (Counts{2, 0, 0}) || !got.Claimed {
		t.Errorf("ListenerSet row = %+v", got)
	}
	// A test counts for every extended feature it needs.
	if got := byName["HTTPRouteRequestMirror"]; got.Counts != (Counts{0, 0, 1}) || got.Note != "no mirrors" || got.Claimed {
		t.Errorf("mirror row = %+v", got)
	}
	if got := byName["HTTPRouteRequestMultipleMirrors"]; got.Counts != (Counts{0, 0, 1}) {
		t.Errorf("multiple mirrors row = %+v", got)
	}
	if len(rows) != 1+p.ExtendedFeatures.Len() {
		t.Errorf("%d rows, want core plus %d features", len(rows), p.ExtendedFeatures.Len())
	}
	if rows[1].Name != "ListenerSet" {
		t.Errorf("claimed features come first, got %s", rows[1].Name)
	}
	// The TLSRoute test belongs to another profile.
	if got := Total(p, ran); got != (Counts{3, 1, 2}) {
		t.Errorf("Total = %+v, want 3 passed, 1 failed, 2 skipped", got)
	}
	if got := Summary(Counts{3, 1, 2}); got != "conformance: 3 passed, 1 failed, 2 skipped" {
		t.Errorf("Summary = %q", got)
	}
	md := Markdown("# head\n", []suite.ConformanceProfile{p}, ran, claimed, notClaimed)
	for _, want := range []string{"| ListenerSet | yes | 2 | 0 | 0 |  |", "| Mirror2 | skipped | not claimed |", "| GATEWAY-HTTP core | yes | 1 | 1 | 1 |"} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}
	if strings.Contains(md, "| TLSRoute |") {
		t.Error("markdown lists a test of another profile")
	}
}

func TestSkipReason(t *testing.T) {
	r := &Results{
		Supported:  sets.New(features.SupportGateway, features.SupportHTTPRoute),
		NotClaimed: map[features.FeatureName]string{features.SupportHTTPRouteCORS: "no CORS"},
		Skips:      map[string]string{"Named": "named reason"},
	}
	for _, tc := range []struct {
		test suite.ConformanceTest
		want string
	}{
		{suite.ConformanceTest{ShortName: "X", Features: []features.FeatureName{features.SupportHTTPRouteCORS}}, "HTTPRouteCORS: no CORS"},
		{suite.ConformanceTest{ShortName: "Y", Features: []features.FeatureName{features.SupportTLSRoute}}, "TLSRoute: not claimed"},
		{suite.ConformanceTest{ShortName: "Named", Features: []features.FeatureName{features.SupportGateway}}, "named reason"},
		{suite.ConformanceTest{ShortName: "P", Provisional: true}, "provisional test"},
	} {
		if got := r.skipReason(tc.test); got != tc.want {
			t.Errorf("skipReason(%s) = %q, want %q", tc.test.ShortName, got, tc.want)
		}
	}
}
