package conformance

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/sets"
	"sigs.k8s.io/gateway-api/conformance/tests"
	"sigs.k8s.io/gateway-api/pkg/features"
)

// Every extended feature of a claimed profile is either claimed or has a
// reason not to be, so a feature added upstream cannot go unnoticed.
func TestEveryExtendedFeatureIsDecided(t *testing.T) {
	for _, channel := range []string{"standard", "experimental"} {
		for _, perGateway := range []bool{false, true} {
			name := channel
			if perGateway {
				name += "-per-gateway"
			}
			t.Run(name, func(t *testing.T) {
				claimedList, notClaimed := claims(channel, perGateway)
				everyFeatureDecided(t, claimedList, notClaimed)
			})
		}
	}
}

func everyFeatureDecided(t *testing.T, claimedList []features.FeatureName, notClaimed map[features.FeatureName]string) {
	claimed := sets.New(claimedList...)
	if claimed.Len() != len(claimedList) {
		t.Errorf("Claimed lists a feature twice: %v", claimedList)
	}
	all := sets.New[features.FeatureName]()
	for _, name := range Profiles {
		p, err := profileByName(name)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range sets.List(p.ExtendedFeatures) {
			all.Insert(f)
			_, isNotClaimed := notClaimed[f]
			switch {
			case claimed.Has(f) && isNotClaimed:
				t.Errorf("%s is both claimed and not claimed", f)
			case !claimed.Has(f) && !isNotClaimed:
				t.Errorf("%s (extended in %s) is neither claimed nor given a reason in NotClaimed", f, name)
			}
		}
	}
	for _, f := range claimedList {
		if !all.Has(f) {
			t.Errorf("claimed feature %s is no extended feature of the claimed profiles", f)
		}
	}
	for f, reason := range notClaimed {
		if !all.Has(f) {
			t.Errorf("NotClaimed names %s, which no claimed profile has", f)
		}
		if strings.TrimSpace(reason) == "" {
			t.Errorf("NotClaimed[%s] has no reason", f)
		}
	}
}

func TestSkippedTestsExistAndSayWhy(t *testing.T) {
	known := sets.New[string]()
	for _, test := range tests.ConformanceTests {
		known.Insert(test.ShortName)
	}
	for name, reason := range SkippedTests {
		if !known.Has(name) {
			t.Errorf("SkippedTests names %s, which the suite does not have", name)
		}
		if strings.TrimSpace(reason) == "" {
			t.Errorf("SkippedTests[%s] has no reason", name)
		}
	}
}

func TestTimeoutsOnlyShorten(t *testing.T) {
	got := Timeouts()
	if got.GatewayMustHaveCondition != conditionWait || got.HTTPRouteMustHaveCondition != conditionWait {
		t.Errorf("condition waits = %v, %v; want %v", got.GatewayMustHaveCondition, got.HTTPRouteMustHaveCondition, conditionWait)
	}
	if got.NamespacesMustBeReady <= conditionWait {
		t.Errorf("NamespacesMustBeReady = %v: the wait for the base Pods must keep its default", got.NamespacesMustBeReady)
	}
	if got.MaxTimeToConsistency == 0 || got.RequestTimeout == 0 {
		t.Errorf("traffic timeouts lost their defaults: %+v", got)
	}
}
