// Package policytarget checks the GEP-713 targetRefs of Portico's own
// policy kinds (group portico.dev) by the rules their CRDs' schemas state,
// for objects that reach translate without an API server: each kind
// states which kinds it may target and which of them by section.
package policytarget

import (
	"fmt"
	"strings"

	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// Kind is a kind a policy may target.
type Kind struct {
	Kind  gwv1.Kind
	Group gwv1.Group
	// Sections: a target of this kind may name one of its sections (a
	// route's rule, a listener); others are targeted whole.
	Sections bool
}

// Problems are what is wrong with refs, each a message that names the
// field (spec.targetRefs[i]...): between 1 and most of them are needed,
// each of one of kinds, in its group, named, with a section only where
// its kind has them. also, when set, adds what else the policy forbids of
// a ref of one of kinds (its message, or ""), before its group is checked.
func Problems(refs []gwv1.LocalPolicyTargetReferenceWithSectionName, most int, kinds []Kind, also func(at string, ref gwv1.LocalPolicyTargetReferenceWithSectionName) string) []string {
	var errs []string
	add := func(format string, a ...any) { errs = append(errs, fmt.Sprintf(format, a...)) }
	if len(refs) == 0 || len(refs) > most {
		add("spec.targetRefs: between 1 and %d targets are needed, not %d", most, len(refs))
	}
	names := make([]string, len(kinds))
	for i, k := range kinds {
		names[i] = string(k.Kind)
	}
	for i, ref := range refs {
		at := fmt.Sprintf("spec.targetRefs[%d]", i)
		k, ok := find(kinds, ref.Kind)
		var other string
		if ok && also != nil {
			other = also(at, ref)
		}
		switch {
		case !ok:
			add("%s.kind: %q is not one of %s", at, ref.Kind, strings.Join(names, ", "))
		case other != "":
			errs = append(errs, other)
		case ref.Group != k.Group:
			add("%s.group: %s is of group %q, not %q", at, ref.Kind, k.Group, ref.Group)
		case ref.SectionName != nil && !k.Sections:
			add("%s.sectionName: only a route's rule may be named; %s is targeted whole", at, ref.Kind)
		}
		if ref.Name == "" {
			add("%s.name: required", at)
		}
	}
	return errs
}

func find(kinds []Kind, kind gwv1.Kind) (Kind, bool) {
	for _, k := range kinds {
		if k.Kind == kind {
			return k, true
		}
	}
	return Kind{}, false
}
