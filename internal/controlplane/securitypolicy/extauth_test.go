package securitypolicy

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
)

func TestValidateExtAuth(t *testing.T) {
	refs := []gwv1.LocalPolicyTargetReferenceWithSectionName{route("web")}
	port := gwv1.PortNumber(9000)
	good := &ExtAuth{HTTP: &HTTPExtAuth{BackendRef: &gwv1.BackendObjectReference{Name: "authz", Port: &port}, Path: "/check", HeadersToAuth: []string{"Authorization"}}}
	if err := (&Spec{TargetRefs: refs, ExtAuth: good}).Validate(); err != nil {
		t.Fatalf("valid extAuth refused: %v", err)
	}
	if err := (&Spec{TargetRefs: refs, ExtAuth: &ExtAuth{HTTP: &HTTPExtAuth{Address: "127.0.0.1:9191"}, Timeout: ptr.To(gwv1.Duration("500ms"))}}).Validate(); err != nil {
		t.Fatalf("valid extAuth by address refused: %v", err)
	}
	for _, tc := range []struct {
		e    *ExtAuth
		want string
	}{
		{&ExtAuth{}, "exactly one of http and grpc"},
		{&ExtAuth{HTTP: &HTTPExtAuth{Address: "h:1"}, GRPC: &GRPCExtAuth{Address: "h:1"}}, "exactly one of http and grpc"},
		{&ExtAuth{GRPC: &GRPCExtAuth{}}, "spec.extAuth.grpc: exactly one of backendRef and address"},
		{&ExtAuth{GRPC: &GRPCExtAuth{Address: "h:1", HeadersToAuth: []string{"a:b"}}}, "spec.extAuth.grpc.headersToAuth[0]"},
		{&ExtAuth{HTTP: &HTTPExtAuth{}}, "exactly one of backendRef and address"},
		{&ExtAuth{HTTP: &HTTPExtAuth{BackendRef: good.HTTP.BackendRef, Address: "a:1"}}, "exactly one of backendRef and address"},
		{&ExtAuth{HTTP: &HTTPExtAuth{BackendRef: &gwv1.BackendObjectReference{Name: "authz"}}}, "backendRef.port: required"},
		{&ExtAuth{HTTP: &HTTPExtAuth{BackendRef: &gwv1.BackendObjectReference{Name: "authz", Port: &port, Kind: ptr.To(gwv1.Kind("Backend"))}}}, "only core Services"},
		{&ExtAuth{HTTP: &HTTPExtAuth{Address: "no-port"}}, "is not host:port"},
		{&ExtAuth{HTTP: &HTTPExtAuth{Address: "h:70000"}}, "is not host:port"},
		{&ExtAuth{HTTP: &HTTPExtAuth{Address: "h:1", Path: "check"}}, "spec.extAuth.http.path"},
		{&ExtAuth{HTTP: &HTTPExtAuth{Address: "h:1", Path: "/a?b"}}, "spec.extAuth.http.path"},
		{&ExtAuth{HTTP: &HTTPExtAuth{Address: "h:1", HeadersToBackend: []string{"a b"}}}, "headersToBackend[0]"},
		{&ExtAuth{HTTP: &HTTPExtAuth{Address: "h:1"}, Timeout: ptr.To(gwv1.Duration("0s"))}, "spec.extAuth.timeout"},
		{&ExtAuth{HTTP: &HTTPExtAuth{Address: "h:1"}, Timeout: ptr.To(gwv1.Duration("2h"))}, "spec.extAuth.timeout"},
		{&ExtAuth{HTTP: &HTTPExtAuth{Address: "h:1"}, ForwardBody: &gwv1.ForwardBodyConfig{MaxSize: -1}}, "spec.extAuth.forwardBody.maxSize"},
		{&ExtAuth{HTTP: &HTTPExtAuth{Address: "h:1"}, ForwardBody: &gwv1.ForwardBodyConfig{MaxSize: MaxExtAuthBody + 1}}, "spec.extAuth.forwardBody.maxSize"},
	} {
		err := (&Spec{TargetRefs: refs, ExtAuth: tc.e}).Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want an error saying %q", tc.e, err, tc.want)
		}
	}
}

func TestCompileExtAuth(t *testing.T) {
	port := gwv1.PortNumber(9000)
	p := &SecurityPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "p"}, Spec: Spec{
		TargetRefs: []gwv1.LocalPolicyTargetReferenceWithSectionName{route("web")},
		ExtAuth: &ExtAuth{FailOpen: true, ForwardBody: &gwv1.ForwardBodyConfig{MaxSize: 2048}, HTTP: &HTTPExtAuth{
			BackendRef: &gwv1.BackendObjectReference{Name: "authz", Namespace: ptr.To(gwv1.Namespace("vault")), Port: &port},
			Path:       "/check/", HeadersToAuth: []string{"x-tenant"}, HeadersToBackend: []string{"x-user"},
		}},
	}}
	sec, prob := Compile(p, nil, func(types.NamespacedName) *corev1.Secret { return nil })
	if prob != nil {
		t.Fatal(prob)
	}
	e := sec.ExtAuth
	if e == nil || e.Backend == nil || e.Backend.String() != "vault/authz:9000" || e.Path != "/check" || e.Timeout != DefaultExtAuthTimeout || !e.FailOpen ||
		e.HeadersToAuth[0] != "X-Tenant" || e.HeadersToBackend[0] != "X-User" || e.ForwardBody != 2048 {
		t.Fatalf("compiled %+v", e)
	}
	services := func(key types.NamespacedName) ([]int32, bool) {
		if key == (types.NamespacedName{Namespace: "vault", Name: "authz"}) {
			return []int32{9000}, true
		}
		return nil, false
	}
	if prob := ExtAuthRefProblem(p, nil, services); prob == nil || prob.Reason != ReasonRefNotPermitted {
		t.Fatalf("another namespace's Service without a grant: %+v", prob)
	}
	grant := &gwv1.ReferenceGrant{ObjectMeta: metav1.ObjectMeta{Namespace: "vault", Name: "g"}, Spec: gwv1.ReferenceGrantSpec{
		From: []gwv1.ReferenceGrantFrom{{Group: Group, Kind: Kind, Namespace: "apps"}},
		To:   []gwv1.ReferenceGrantTo{{Kind: "Service"}},
	}}
	if prob := ExtAuthRefProblem(p, []*gwv1.ReferenceGrant{grant}, services); prob != nil {
		t.Fatalf("granted Service: %+v", prob)
	}
	secretGrant := grant.DeepCopy()
	secretGrant.Spec.To[0].Kind = "Secret"
	if prob := ExtAuthRefProblem(p, []*gwv1.ReferenceGrant{secretGrant}, services); prob == nil {
		t.Fatal("a grant of Secrets let the policy use a Service")
	}
	p.Spec.ExtAuth.HTTP.BackendRef.Port = ptr.To(gwv1.PortNumber(1))
	if prob := ExtAuthRefProblem(p, []*gwv1.ReferenceGrant{grant}, services); prob == nil || prob.Reason != ReasonBackendNotFound {
		t.Fatalf("missing port: %+v", prob)
	}
}
