package knative

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
)

// Defaulted returns a copy of spec with upstream's defaults: a path's lone
// split with no percent gets 100. The copy shares maps and leaf slices with
// spec, which it never changes.
func Defaulted(spec *IngressSpec) IngressSpec {
	out := *spec
	out.Rules = make([]IngressRule, len(spec.Rules))
	for i, r := range spec.Rules {
		if r.HTTP != nil {
			http := *r.HTTP
			http.Paths = make([]HTTPIngressPath, len(r.HTTP.Paths))
			for j, p := range r.HTTP.Paths {
				if len(p.Splits) == 1 && p.Splits[0].Percent == 0 {
					s := p.Splits[0]
					s.Percent = 100
					p.Splits = []IngressBackendSplit{s}
				}
				http.Paths[j] = p
			}
			r.HTTP = &http
		}
		out.Rules[i] = r
	}
	if spec.Rules == nil {
		out.Rules = nil
	}
	return out
}

// Hash is the hash Knative's prober expects back for ing: hex of the
// SHA-256 of the JSON of its defaulted spec, its namespace and its name.
func Hash(ing *Ingress) (string, error) {
	spec := Defaulted(&ing.Spec)
	b, err := json.Marshal(&spec)
	if err != nil {
		return "", fmt.Errorf("ingress %s/%s: encoding its spec: %w", ing.Namespace, ing.Name, err)
	}
	h := sha256.New()
	h.Write(b)
	h.Write([]byte(ing.Namespace))
	h.Write([]byte(ing.Name))
	return hex.EncodeToString(h.Sum(nil)), nil
}
