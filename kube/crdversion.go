package kube

import (
	"context"
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/metadata"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
	"sigs.k8s.io/gateway-api/pkg/consts"

	"portico.dev/portico/conditions"
	"portico.dev/portico/status"
)

var crdResource = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// checkCRDVersions reads the bundle-version annotation of every Gateway API
// CRD Portico uses and describes each one Portico was not built for. Any
// patch release of Portico's own minor version is supported.
func checkCRDVersions(ctx context.Context, md metadata.Interface) ([]string, error) {
	var problems []string
	// The Gateway API CRDs Portico reads.
	for _, plural := range []string{"gatewayclasses", "gateways", "listenersets", "httproutes", "tlsroutes", "referencegrants", "backendtlspolicies"} {
		name := plural + "." + gwv1.GroupName
		obj, err := md.Resource(crdResource).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return nil, fmt.Errorf("read CRD %s: %w", name, err)
		}
		v, ok := obj.Annotations[consts.BundleVersionAnnotation]
		switch {
		case !ok:
			problems = append(problems, fmt.Sprintf("CRD %s has no %s annotation", name, consts.BundleVersionAnnotation))
		case minorVersion(v) != minorVersion(consts.BundleVersion):
			problems = append(problems, fmt.Sprintf("CRD %s is version %s", name, v))
		}
	}
	return problems, nil
}

// minorVersion turns "v1.6.3" into "v1.6".
func minorVersion(v string) string {
	parts := strings.SplitN(v, ".", 3)
	if len(parts) < 2 {
		return v
	}
	return parts[0] + "." + parts[1]
}

// setUnsupportedVersion turns every GatewayClass's SupportedVersion
// condition False. Portico keeps serving the classes (Accepted stays True):
// its support for other CRD versions is best effort, as the specification
// allows.
func setUnsupportedVersion(st *status.Computed, problems []string) {
	msg := fmt.Sprintf("Portico supports Gateway API %s: %s", minorVersion(consts.BundleVersion)+".x", strings.Join(problems, "; "))
	for name, gcs := range st.GatewayClasses {
		gcs.Conditions = conditions.Set(gcs.Conditions, gwv1.GatewayClassConditionStatusSupportedVersion, metav1.ConditionFalse,
			gwv1.GatewayClassReasonUnsupportedVersion, msg)
		st.GatewayClasses[name] = gcs
	}
}
