// Package validation refuses the objects an API server would refuse, for the
// sources that have no API server in front of them (standalone YAML). For
// Gateway API kinds it applies the installed CRDs' own rules: the OpenAPI
// schema (types, enums, patterns, lengths, ranges), list-map keys, the CEL
// rules and object metadata. For the core kinds Portico reads (Service,
// EndpointSlice, Secret, ConfigMap, Namespace) it applies the API server's
// rules for the fields Portico uses. What a cluster would refuse is then
// refused in standalone mode too, with the file and document named, instead
// of reaching translate and taking a port down.
package validation

import (
	"fmt"
	"strings"
	"sync/atomic"

	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Checker checks objects. Safe for concurrent use.
type Checker struct {
	crds *Schemas
	// checked counts the objects Check was given: a reload is to check
	// only the objects that changed, and tests count them.
	checked atomic.Int64
}

// Checked is the number of objects checked so far.
func (c *Checker) Checked() int64 { return c.checked.Load() }

// New returns a Checker with the embedded Gateway API schemas.
func New() (*Checker, error) {
	crds, err := Load()
	if err != nil {
		return nil, err
	}
	return &Checker{crds: crds}, nil
}

// Default gives raw, an object decoded from JSON with
// k8s.io/apimachinery/pkg/util/json (integers as int64), the defaults of
// its kind's schema, in place: what the API server stores and Portico then
// reads. Decode the typed object from raw after this.
func (c *Checker) Default(apiVersion, kind string, raw map[string]any) error {
	return c.crds.Default(apiVersion, kind, raw)
}

// HasSchema reports whether apiVersion/kind is a kind of the embedded
// CRDs: Default and Check then need its JSON form; for the other kinds
// Default does nothing and Check reads the typed object alone.
func (c *Checker) HasSchema(apiVersion, kind string) bool {
	_, ok := c.crds.Knows(apiVersion, kind)
	return ok
}

// Check validates one defaulted object: raw is its JSON form as decoded with
// k8s.io/apimachinery/pkg/util/json (integers as int64), obj the typed
// object decoded from the same bytes. It returns nil when the object would
// be admitted.
func (c *Checker) Check(apiVersion, kind string, raw map[string]any, obj metav1.Object) error {
	c.checked.Add(1)
	var errs field.ErrorList
	if namespaced, ok := c.crds.Knows(apiVersion, kind); ok {
		errs = validateMetadata(obj, apivalidation.NameIsDNSSubdomain, namespaced)
		errs = append(errs, c.crds.Validate(apiVersion, kind, raw)...)
	} else {
		errs = validateCore(obj)
	}
	if len(errs) == 0 {
		return nil
	}
	return &Error{Kind: kind, Name: obj.GetName(), Errs: errs}
}

// Error lists why an object would not be admitted.
type Error struct {
	Kind, Name string
	Errs       field.ErrorList
}

// maxShown bounds the errors one message lists: a file of generated
// objects can break thousands of rules at once.
const maxShown = 5

func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %q is invalid: ", e.Kind, e.Name)
	for i, fe := range e.Errs {
		if i == maxShown {
			fmt.Fprintf(&b, "; and %d more", len(e.Errs)-maxShown)
			break
		}
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(strings.TrimPrefix(fe.Error(), "<nil>: "))
	}
	return b.String()
}
