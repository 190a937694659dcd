package source

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/metadata"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
	"sigs.k8s.io/gateway-api/pkg/consts"

	"portico.dev/portico/internal/controlplane/wellknown"
)

// CRDResource is the resource of CustomResourceDefinitions, whose
// metadata alone CheckCRDVersions reads.
var CRDResource = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// CheckCRDVersions reads the bundle-version annotation of every Gateway API
// CRD Portico uses and describes each one Portico was not built for. Any
// patch release of Portico's own minor version is supported.
func CheckCRDVersions(ctx context.Context, md metadata.Interface) ([]string, error) {
	var problems []string
	// The Gateway API CRDs Portico reads.
	for _, plural := range []string{"gatewayclasses", "gateways", "listenersets", "httproutes", "tlsroutes", "referencegrants", "backendtlspolicies"} {
		name := plural + "." + gwv1.GroupName
		obj, err := md.Resource(CRDResource).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return nil, fmt.Errorf("read CRD %s: %w", name, err)
		}
		v, ok := obj.Annotations[consts.BundleVersionAnnotation]
		switch {
		case !ok:
			problems = append(problems, fmt.Sprintf("CRD %s has no %s annotation", name, consts.BundleVersionAnnotation))
		case wellknown.MinorVersion(v) != wellknown.MinorVersion(consts.BundleVersion):
			problems = append(problems, fmt.Sprintf("CRD %s is version %s", name, v))
		}
	}
	return problems, nil
}
