// Package provision renders the objects of a Gateway's own data plane
// (GEP-1762): a ServiceAccount, a Deployment running Portico for that one
// Gateway, a Service in front of it and, when asked for, a
// PodDisruptionBudget, all in the Gateway's namespace and owned by it.
//
// Rendering is a pure function of its input: the same Gateway, parameters
// and ports give byte-for-byte the same objects, so that a controller that
// restarts applies nothing new and never rolls a data plane.
package provision

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"maps"
	"regexp"
	"slices"
	"strings"

	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"k8s.io/apimachinery/pkg/util/validation"

	"portico.dev/portico/internal/controlplane/parameters"
	"portico.dev/portico/internal/controlplane/wellknown"
)

// AppliedVersionAnnotation is set on a data plane's Deployment to the
// version of the configuration its pods acknowledged. Acknowledgements reach
// whichever controller replica a data plane dialled; the annotation brings
// them to the leader, which writes status. It is metadata of the
// Deployment, not of its pod template: it rolls nothing.
const AppliedVersionAnnotation = "portico.dev/applied-version"

// Labels Portico sets on everything it provisions.
const (
	// GatewayNameLabel and GatewayClassLabel are the spec's own labels.
	GatewayNameLabel  = gwv1.GatewayNameLabelKey
	GatewayClassLabel = "gateway.networking.k8s.io/gateway-class-name"
	nameLabel         = "app.kubernetes.io/name"
	instanceLabel     = "app.kubernetes.io/instance"
	componentLabel    = "app.kubernetes.io/component"
	// reservedPrefix: keys the spec keeps for itself; a Gateway's
	// infrastructure labels and annotations under it are dropped.
	reservedPrefix = "gateway.networking.k8s.io/"
)

// Port is one listener port of a Gateway or of an attached ListenerSet.
type Port struct {
	Port     int32
	Protocol gwv1.ProtocolType
}

// Input is one Gateway whose class gives each Gateway a data plane.
type Input struct {
	Gateway   *gwv1.Gateway
	ClassName string
	// Parameters are the class's merged with the Gateway's.
	Parameters parameters.Spec
	// Ports are the listener ports of the Gateway and its attached
	// ListenerSets, each once, in any order.
	Ports []Port
	// Accepted is false when the Gateway is not accepted now: what runs
	// for it is left as it is (no outage from a typo) and nothing is
	// rendered.
	Accepted bool
}

// Name is the name of the objects of a Gateway's data plane:
// "<gateway>-<gatewayclass>" when that is a DNS-1035 label (what a Service
// name must be), else a label made from it that ends with a hash of both
// names. Two Gateways of one namespace can still share one ("web" of
// class "public-portico", "web-public" of class "portico"): the
// controller provisions only the first created of them.
func Name(gateway, class string) string {
	n := gateway + "-" + class
	if len(validation.IsDNS1035Label(n)) == 0 {
		return n
	}
	return hashed(n, gateway+"/"+class, validation.DNS1035LabelMaxLength)
}

var notLabel = regexp.MustCompile(`[^a-z0-9-]+`)

// hashed is s made into a DNS-1035 label of at most max characters, with
// the first 8 hex digits of key's SHA-256 at its end.
func hashed(s, key string, max int) string {
	sum := sha256.Sum256([]byte(key))
	suffix := hex.EncodeToString(sum[:4])
	s = notLabel.ReplaceAllString(strings.ToLower(s), "-")
	s = strings.TrimLeft(s, "-0123456789")
	s = s[:min(len(s), max-len(suffix)-1)]
	s = strings.TrimRight(s, "-")
	if s == "" {
		return "gw-" + suffix
	}
	return s + "-" + suffix
}

// labelValue is v when it is a valid label value, else a hashed form of
// it (a Gateway's name may be longer than a label value can be).
func labelValue(v string) string {
	if len(validation.IsValidLabelValue(v)) == 0 {
		return v
	}
	return hashed(v, v, validation.LabelValueMaxLength)
}

// SelectorLabels select the pods of a data plane. They are derived from
// the Gateway's and class's names only: a Deployment's selector cannot
// change, so it never holds infrastructure labels. Their name is not
// Portico's own controller's (app.kubernetes.io/name: portico), whose
// Service and Deployment must never select a data plane's pods.
func SelectorLabels(gateway, class string) map[string]string {
	return map[string]string{
		nameLabel:     "portico-data-plane",
		instanceLabel: Name(gateway, class),
	}
}

// ownLabels are the labels Portico puts on every object and pod of a data
// plane; they win over infrastructure labels of the same key.
func ownLabels(in *Input) map[string]string {
	l := SelectorLabels(in.Gateway.Name, in.ClassName)
	l[componentLabel] = "data-plane"
	l[wellknown.ManagedByLabel] = wellknown.ManagedByValue
	l[GatewayNameLabel] = labelValue(in.Gateway.Name)
	l[GatewayClassLabel] = labelValue(in.ClassName)
	return l
}

// metadata is the labels and annotations of every object: the Gateway's
// spec.infrastructure ones without reserved keys, then Portico's own.
func metadata(in *Input) (labels, annotations map[string]string) {
	labels = map[string]string{}
	annotations = map[string]string{}
	if inf := in.Gateway.Spec.Infrastructure; inf != nil {
		for k, v := range inf.Labels {
			if !strings.HasPrefix(string(k), reservedPrefix) {
				labels[string(k)] = string(v)
			}
		}
		for k, v := range inf.Annotations {
			if !strings.HasPrefix(string(k), reservedPrefix) {
				annotations[string(k)] = string(v)
			}
		}
	}
	maps.Copy(labels, ownLabels(in))
	return labels, annotations
}

// sortedPorts are in's ports, each once, by number, a UDP port after the
// TCP one of its number: it is another port of the Service.
func sortedPorts(in []Port) []Port {
	out := slices.Clone(in)
	udp := func(p Port) bool { return p.Protocol == gwv1.UDPProtocolType }
	slices.SortFunc(out, func(a, b Port) int {
		if c := cmp.Compare(a.Port, b.Port); c != 0 {
			return c
		}
		return cmp.Compare(btoi(udp(a)), btoi(udp(b)))
	})
	return slices.CompactFunc(out, func(a, b Port) bool { return a.Port == b.Port && udp(a) == udp(b) })
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// Holders is, by namespace and data plane name, the Gateway that holds the
// name: the first created (then the first by name) of those whose names
// map to it (Name("web", "public-portico") is Name("web-public",
// "portico")). Another Gateway, maybe of another user of the namespace,
// must not take over its data plane's Service and Deployment, nor share
// its ServiceAccount and so its snapshot: the controller provisions and
// publishes only for the holder, and the others are not Programmed.
func Holders(inputs []Input) map[[2]string]*gwv1.Gateway {
	out := make(map[[2]string]*gwv1.Gateway, len(inputs))
	for _, in := range inputs {
		key := [2]string{in.Gateway.Namespace, Name(in.Gateway.Name, in.ClassName)}
		h := out[key]
		if h == nil || in.Gateway.CreationTimestamp.Before(&h.CreationTimestamp) ||
			(in.Gateway.CreationTimestamp.Equal(&h.CreationTimestamp) && in.Gateway.Name < h.Name) {
			out[key] = in.Gateway
		}
	}
	return out
}
