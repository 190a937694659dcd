package policytarget

import (
	"slices"
	"testing"

	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
)

func TestProblems(t *testing.T) {
	kinds := []Kind{
		{Kind: "Gateway", Group: gwv1.GroupName},
		{Kind: "HTTPRoute", Group: gwv1.GroupName, Sections: true},
		{Kind: "Service"},
	}
	section := gwv1.SectionName("rule-1")
	ref := func(group gwv1.Group, kind gwv1.Kind, name string, section *gwv1.SectionName) gwv1.LocalPolicyTargetReferenceWithSectionName {
		return gwv1.LocalPolicyTargetReferenceWithSectionName{
			LocalPolicyTargetReference: gwv1.LocalPolicyTargetReference{Group: group, Kind: kind, Name: gwv1.ObjectName(name)},
			SectionName:                section,
		}
	}
	noRoutes := func(at string, r gwv1.LocalPolicyTargetReferenceWithSectionName) string {
		if r.Kind == "HTTPRoute" {
			return at + ".kind: no routes here"
		}
		return ""
	}
	for _, tc := range []struct {
		name string
		refs []gwv1.LocalPolicyTargetReferenceWithSectionName
		also func(string, gwv1.LocalPolicyTargetReferenceWithSectionName) string
		want []string
	}{
		{name: "valid", refs: []gwv1.LocalPolicyTargetReferenceWithSectionName{
			ref(gwv1.GroupName, "Gateway", "gw", nil), ref(gwv1.GroupName, "HTTPRoute", "r", &section), ref("", "Service", "s", nil),
		}},
		{name: "none", want: []string{"spec.targetRefs: between 1 and 3 targets are needed, not 0"}},
		{name: "too many", refs: []gwv1.LocalPolicyTargetReferenceWithSectionName{
			ref("", "Service", "a", nil), ref("", "Service", "b", nil), ref("", "Service", "c", nil), ref("", "Service", "d", nil),
		}, want: []string{"spec.targetRefs: between 1 and 3 targets are needed, not 4"}},
		{name: "unknown kind, unnamed", refs: []gwv1.LocalPolicyTargetReferenceWithSectionName{ref(gwv1.GroupName, "TCPRoute", "", nil)},
			want: []string{`spec.targetRefs[0].kind: "TCPRoute" is not one of Gateway, HTTPRoute, Service`, "spec.targetRefs[0].name: required"}},
		{name: "wrong group", refs: []gwv1.LocalPolicyTargetReferenceWithSectionName{ref(gwv1.GroupName, "Service", "s", nil)},
			want: []string{`spec.targetRefs[0].group: Service is of group "", not "gateway.networking.k8s.io"`}},
		{name: "section of a whole target", refs: []gwv1.LocalPolicyTargetReferenceWithSectionName{ref(gwv1.GroupName, "Gateway", "gw", &section)},
			want: []string{"spec.targetRefs[0].sectionName: only a route's rule may be named; Gateway is targeted whole"}},
		{name: "also before group", also: noRoutes, refs: []gwv1.LocalPolicyTargetReferenceWithSectionName{
			ref("", "Gateway", "gw", nil), ref("", "HTTPRoute", "r", nil),
		}, want: []string{
			`spec.targetRefs[0].group: Gateway is of group "gateway.networking.k8s.io", not ""`,
			"spec.targetRefs[1].kind: no routes here",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Problems(tc.refs, 3, kinds, tc.also); !slices.Equal(got, tc.want) {
				t.Errorf("Problems = %q, want %q", got, tc.want)
			}
		})
	}
}
