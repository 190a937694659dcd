package conformance

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"k8s.io/apimachinery/pkg/util/sets"
	"sigs.k8s.io/gateway-api/conformance/utils/suite"
	"sigs.k8s.io/gateway-api/pkg/features"
)

// Outcome is how one test ended.
type Outcome string

const (
	Passed  Outcome = "passed"
	Failed  Outcome = "failed"
	Skipped Outcome = "skipped"
)

// TestResult is one test of the suite as it ran.
type TestResult struct {
	Name     string
	Features []features.FeatureName
	Outcome  Outcome
	// Reason says why a test was skipped.
	Reason string
}

// Results collects every test's outcome through the suite's Hook, with the
// reason for each skip, which the suite's own report does not keep.
type Results struct {
	// Supported are the features the suite ran with.
	Supported sets.Set[features.FeatureName]
	// NotClaimed and Skips give the reasons for skipped tests.
	NotClaimed map[features.FeatureName]string
	Skips      map[string]string

	mu    sync.Mutex
	tests []TestResult
}

// Hook is for suite.ConformanceOptions.Hook: the suite calls it once each
// test has finished.
func (r *Results) Hook(t *testing.T, test suite.ConformanceTest, _ *suite.ConformanceTestSuite) {
	res := TestResult{Name: test.ShortName, Features: test.Features}
	switch {
	case t.Failed():
		res.Outcome = Failed
	case t.Skipped():
		res.Outcome = Skipped
		res.Reason = r.skipReason(test)
	default:
		res.Outcome = Passed
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.tests = append(r.tests, res)
}

func (r *Results) skipReason(test suite.ConformanceTest) string {
	var missing []string
	for _, f := range test.Features {
		if !r.Supported.Has(f) {
			reason := r.NotClaimed[f]
			if reason == "" {
				reason = "not claimed"
			}
			missing = append(missing, fmt.Sprintf("%s: %s", f, reason))
		}
	}
	if len(missing) > 0 {
		return strings.Join(missing, "; ")
	}
	if reason, ok := r.Skips[test.ShortName]; ok {
		return reason
	}
	if test.Provisional {
		return "provisional test"
	}
	return "skipped by the test itself"
}

// Tests returns the results in the order the tests ran.
func (r *Results) Tests() []TestResult {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.tests)
}

// Counts is a tally of outcomes.
type Counts struct{ Passed, Failed, Skipped int }

func (c *Counts) add(o Outcome) {
	switch o {
	case Passed:
		c.Passed++
	case Failed:
		c.Failed++
	case Skipped:
		c.Skipped++
	}
}

// Row is one line of the per-feature table.
type Row struct {
	// Name is "<profile> core" or a feature name.
	Name    string
	Claimed bool
	Counts
	// Note is why the feature is not claimed, or why tests were skipped.
	Note string
}

// inProfile reports whether every feature of the test belongs to the
// profile, the way the suite assigns tests to profiles in its report.
func inProfile(p suite.ConformanceProfile, fs []features.FeatureName) bool {
	for _, f := range fs {
		if !p.CoreFeatures.Has(f) && !p.ExtendedFeatures.Has(f) {
			return false
		}
	}
	return true
}

// Table tallies the tests of a profile: one row for its core tests (those
// with no extended feature), then one per extended feature, counting every
// test that needs the feature.
func Table(p suite.ConformanceProfile, tests []TestResult, claimed sets.Set[features.FeatureName], notClaimed map[features.FeatureName]string) []Row {
	core := Row{Name: string(p.Name) + " core", Claimed: true}
	byFeature := map[features.FeatureName]*Row{}
	for _, f := range sets.List(p.ExtendedFeatures) {
		byFeature[f] = &Row{Name: string(f), Claimed: claimed.Has(f), Note: notClaimed[f]}
	}
	coreSkips := sets.New[string]()
	for _, tr := range tests {
		if !inProfile(p, tr.Features) {
			continue
		}
		extended := false
		for _, f := range tr.Features {
			if row, ok := byFeature[f]; ok {
				extended = true
				row.add(tr.Outcome)
				if tr.Outcome == Skipped && row.Claimed && row.Note == "" {
					row.Note = tr.Name + ": " + tr.Reason
				}
			}
		}
		if !extended {
			core.add(tr.Outcome)
			if tr.Outcome == Skipped {
				coreSkips.Insert(tr.Name + ": " + tr.Reason)
			}
		}
	}
	core.Note = strings.Join(sets.List(coreSkips), "; ")
	rows := []Row{core}
	for _, f := range sets.List(p.ExtendedFeatures) {
		rows = append(rows, *byFeature[f])
	}
	// Claimed features first, then the rest, each by name.
	sort.SliceStable(rows[1:], func(i, j int) bool {
		return rows[1+i].Claimed && !rows[1+j].Claimed
	})
	return rows
}

// Total tallies the tests of a profile once each.
func Total(p suite.ConformanceProfile, tests []TestResult) Counts {
	var c Counts
	for _, tr := range tests {
		if inProfile(p, tr.Features) {
			c.add(tr.Outcome)
		}
	}
	return c
}

// Summary is the one line a run ends with.
func Summary(c Counts) string {
	return fmt.Sprintf("conformance: %d passed, %d failed, %d skipped", c.Passed, c.Failed, c.Skipped)
}

// Markdown renders the table of every profile and the list of tests.
func Markdown(header string, profiles []suite.ConformanceProfile, tests []TestResult, claimed sets.Set[features.FeatureName], notClaimed map[features.FeatureName]string) string {
	var b strings.Builder
	b.WriteString(header)
	for _, p := range profiles {
		fmt.Fprintf(&b, "\n| %s | claimed | passed | failed | skipped | reason |\n|---|---|---|---|---|---|\n", p.Name)
		for _, r := range Table(p, tests, claimed, notClaimed) {
			yes := "no"
			if r.Claimed {
				yes = "yes"
			}
			fmt.Fprintf(&b, "| %s | %s | %d | %d | %d | %s |\n", r.Name, yes, r.Passed, r.Failed, r.Skipped, escapeCell(r.Note))
		}
	}
	b.WriteString("\n## Tests\n\n| test | result | reason |\n|---|---|---|\n")
	sorted := slices.Clone(tests)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })
	for _, tr := range sorted {
		in := false
		for _, p := range profiles {
			in = in || inProfile(p, tr.Features)
		}
		if in {
			fmt.Fprintf(&b, "| %s | %s | %s |\n", tr.Name, tr.Outcome, escapeCell(tr.Reason))
		}
	}
	return b.String()
}

func escapeCell(s string) string {
	return strings.ReplaceAll(s, "|", `\|`)
}
