// The CRDs' CEL rules (x-kubernetes-validations), evaluated on create.
//
// The apiextensions Validator gives each rule a fresh schema adaptor whose
// every field access copies the node's properties into a new map: loading
// 10,000 objects spent more CPU in those copies than in the rules. ruleTree
// evaluates the same compiled programs over an adaptor built once per kind
// (schemaView), walking the object as that Validator does, with the same
// cost budget, verdicts and messages (TestRulesMatchTheValidator compares
// them). It covers the schema features the embedded CRDs use; a schema with
// others (allOf, embedded resources, message expressions, rules with an
// optional oldSelf) is left to the Validator (walkable).

package validation

import (
	"context"
	"fmt"
	"math"
	"strings"

	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/interpreter"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel/model"
	"k8s.io/apimachinery/pkg/util/validation/field"
	apiservercel "k8s.io/apiserver/pkg/cel"
	"k8s.io/apiserver/pkg/cel/common"
	"k8s.io/apiserver/pkg/cel/environment"
)

// ruleTree holds the compiled rules of one schema node and the subtrees of
// the nodes below it that hold rules; nil when there are none.
type ruleTree struct {
	view       *schemaView // the node's schema, with TypeMeta and ObjectMeta at a resource root
	rules      apiextensionsv1.ValidationRules
	compiled   []cel.CompilationResult
	compileErr error
	// natives are the native checks of rules that have one (rulenative.go).
	natives []func(any) bool

	items, additional *ruleTree
	properties        map[string]*ruleTree

	memo ruleMemo // the values that passed this subtree (rulememo.go)
}

// walkable reports whether ruleTree covers everything s's rules need.
func walkable(s *schema.Structural) bool {
	if s == nil {
		return true
	}
	if s.XEmbeddedResource || (s.ValueValidation != nil && len(s.ValueValidation.AllOf) > 0) {
		return false
	}
	for _, r := range s.XValidations {
		if r.MessageExpression != "" || r.OptionalOldSelf != nil {
			return false
		}
	}
	for _, p := range s.Properties {
		if !walkable(&p) {
			return false
		}
	}
	if s.AdditionalProperties != nil && !walkable(s.AdditionalProperties.Structural) {
		return false
	}
	return walkable(s.Items)
}

// newRuleTree compiles the rules of the resource schema s, as
// cel.NewValidator(s, true, perCallLimit) would.
func newRuleTree(s *schema.Structural, perCallLimit uint64) *ruleTree {
	env := environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion())
	t := buildRuleTree(s, newSchemaView(s), model.SchemaDeclType(s, true), perCallLimit, env)
	if t != nil {
		// Rules at a resource's root see its TypeMeta and ObjectMeta.
		t.view = newSchemaView(model.WithTypeAndObjectMeta(s))
	}
	return t
}

// buildRuleTree compiles the rules of s and below, view being s's view.
func buildRuleTree(s *schema.Structural, view *schemaView, declType *apiservercel.DeclType, perCallLimit uint64, env *environment.EnvSet) *ruleTree {
	t := &ruleTree{view: view, rules: s.XValidations}
	t.compiled, t.compileErr = cel.Compile(s, declType, perCallLimit, env, cel.StoredExpressionsEnvLoader())
	for i, c := range t.compiled {
		if native := nativeFor(s.XValidations[i].Rule); native != nil && c.Error == nil && c.Program != nil && !c.UsesOldSelf && c.MaxCost <= perCallLimit {
			if t.natives == nil {
				t.natives = make([]func(any) bool, len(t.compiled))
			}
			t.natives[i] = native
		}
	}
	var elem *apiservercel.DeclType
	if declType != nil {
		elem = declType.ElemType
	}
	if s.Items != nil {
		t.items = buildRuleTree(s.Items, view.items.(*schemaView), elem, perCallLimit, env)
	}
	if s.AdditionalProperties != nil && s.AdditionalProperties.Structural != nil {
		t.additional = buildRuleTree(s.AdditionalProperties.Structural, view.additional.(*schemaOrBool).schema.(*schemaView), elem, perCallLimit, env)
	}
	for name, prop := range s.Properties {
		fieldType, ok := propertyType(declType, name, &prop)
		if !ok {
			continue
		}
		if sub := buildRuleTree(&prop, view.properties[name].(*schemaView), fieldType, perCallLimit, env); sub != nil {
			if t.properties == nil {
				t.properties = map[string]*ruleTree{}
			}
			t.properties[name] = sub
		}
	}
	if len(t.compiled) == 0 && t.compileErr == nil && t.items == nil && t.additional == nil && t.properties == nil {
		return nil
	}
	return t
}

// propertyType is the CEL type of property name of an object of type
// declType; ok is false for a property CEL validation leaves out.
func propertyType(declType *apiservercel.DeclType, name string, prop *schema.Structural) (*apiservercel.DeclType, bool) {
	escaped, ok := apiservercel.Escape(name)
	if !ok {
		t := model.SchemaDeclType(prop, prop.XEmbeddedResource)
		return t, t != nil
	}
	if declType == nil {
		return nil, false
	}
	f, ok := declType.Fields[escaped]
	if !ok {
		return nil, false
	}
	return f.Type, true
}

// validate checks obj, a new object (there is no old one to compare with),
// against t's rules and those below it, within budget.
func (t *ruleTree) validate(ctx context.Context, path *field.Path, obj any, budget int64) (field.ErrorList, int64) {
	st := walkState{natives: true}
	errs, left := t.run(ctx, &st, path, obj, budget)
	if left < 0 && st.nativesUsed > 0 {
		// The bounds taken for natives ran the budget out: the walk
		// again, as the evaluation makes it.
		st = walkState{}
		errs, left = t.run(ctx, &st, path, obj, budget)
	}
	return errs, left
}

// walkState is what one validation carries along its walk.
type walkState struct {
	natives     bool // use the native checks
	nativesUsed int  // how many rules a native stood in for
}

// run is validate on t's subtree with st, remembering the values that
// passed it at a cost known exactly.
func (t *ruleTree) run(ctx context.Context, st *walkState, path *field.Path, obj any, budget int64) (field.ErrorList, int64) {
	if t == nil || obj == nil {
		return nil, budget
	}
	key, cost, found := t.memo.lookup(obj)
	if found && budget-cost > 0 {
		return nil, budget - cost
	}
	used := st.nativesUsed
	errs, left := t.walk(ctx, st, path, obj, budget)
	if len(errs) == 0 && left > 0 && st.nativesUsed == used {
		t.memo.remember(key, budget-left)
	}
	return errs, left
}

// walk is run without the memo.
func (t *ruleTree) walk(ctx context.Context, st *walkState, path *field.Path, obj any, budget int64) (field.ErrorList, int64) {
	errs, budget := t.evaluate(ctx, st, path, obj, budget)
	if budget < 0 {
		return errs, budget
	}
	var sub field.ErrorList
	switch obj := obj.(type) {
	case []any:
		if t.items == nil {
			break
		}
		for i, v := range obj {
			sub, budget = t.items.run(ctx, st, path.Index(i), v, budget)
			errs = append(errs, sub...)
			if budget < 0 {
				return errs, budget
			}
		}
	case map[string]any:
		if t.additional != nil {
			for k, v := range obj {
				sub, budget = t.additional.run(ctx, st, path.Key(k), v, budget)
				errs = append(errs, sub...)
				if budget < 0 {
					return errs, budget
				}
			}
		}
		for k, v := range obj {
			p, ok := t.properties[k]
			if !ok {
				continue
			}
			sub, budget = p.run(ctx, st, path.Child(k), v, budget)
			errs = append(errs, sub...)
			if budget < 0 {
				return errs, budget
			}
		}
	}
	return errs, budget
}

// evaluate runs the rules of t's own node on obj.
func (t *ruleTree) evaluate(ctx context.Context, st *walkState, path *field.Path, obj any, budget int64) (field.ErrorList, int64) {
	typ := t.view.s.Type
	if t.compileErr != nil {
		return field.ErrorList{field.Invalid(path, typ, fmt.Sprintf("rule compiler initialization error: %v", t.compileErr))}, budget
	}
	if len(t.compiled) == 0 {
		return nil, budget
	}
	if budget <= 0 {
		return field.ErrorList{field.Invalid(path, typ, "validation failed due to running out of cost budget, no further validation rules will be run")}, -1
	}
	act := activation{self: common.UnstructuredToVal(obj, t.view)}
	var errs field.ErrorList
	for i, c := range t.compiled {
		rule := t.rules[i]
		switch {
		case c.Error != nil:
			errs = append(errs, field.Invalid(path, typ, fmt.Sprintf("rule compile error: %v", c.Error)))
			continue
		case c.Program == nil, c.UsesOldSelf:
			// An empty rule; a transition rule, which has no old
			// object to compare with on create.
			continue
		case st.natives && t.natives != nil && t.natives[i] != nil && int64(c.MaxCost) <= budget && t.natives[i](obj):
			// The rule holds; its cost is at most its bound.
			budget -= int64(c.MaxCost)
			st.nativesUsed++
			continue
		}
		result, details, err := c.Program.ContextEval(ctx, act)
		if details == nil {
			return append(errs, field.InternalError(path, fmt.Errorf("runtime cost could not be calculated for validation rule: %v, no further validation rules will be run", ruleText(rule)))), -1
		}
		cost := details.ActualCost()
		switch {
		case cost == nil:
			return append(errs, field.Invalid(path, typ, fmt.Sprintf("runtime cost could not be calculated for validation rule: %v, no further validation rules will be run", ruleText(rule)))), -1
		case *cost > math.MaxInt64 || int64(*cost) > budget:
			return append(errs, field.Invalid(path, typ, "validation failed due to running out of cost budget, no further validation rules will be run")), -1
		}
		budget -= int64(*cost)
		if err != nil {
			msg := err.Error()
			switch {
			case strings.HasPrefix(msg, "no such overload"):
				errs = append(errs, field.Invalid(path, typ, fmt.Sprintf("'%v': call arguments did not match a supported operator, function or macro signature for rule: %v", err, ruleText(rule))))
			case strings.HasPrefix(msg, "operation cancelled: actual cost limit exceeded"):
				return append(errs, field.Invalid(path, typ, fmt.Sprintf("'%v': no further validation rules will be run due to call cost exceeds limit for rule: %v", err, ruleText(rule)))), -1
			default:
				errs = append(errs, field.Invalid(path, typ, fmt.Sprintf("%v evaluating rule: %v", err, ruleText(rule))))
			}
			continue
		}
		if result == types.True {
			continue
		}
		errs = append(errs, ruleError(path, c, rule, obj, typ))
	}
	return errs, budget
}

// ruleError is the error of a rule obj broke.
func ruleError(path *field.Path, c cel.CompilationResult, rule apiextensionsv1.ValidationRule, obj any, typ string) *field.Error {
	if c.NormalizedRuleFieldPath != "" {
		path = path.Child(c.NormalizedRuleFieldPath)
	}
	detail := strings.TrimSpace(rule.Message)
	if detail == "" {
		detail = "failed rule: " + ruleText(rule)
	}
	value := obj
	if typ == "object" || typ == "array" {
		value = field.OmitValueType{}
	}
	if rule.Reason == nil {
		return field.Invalid(path, value, detail)
	}
	switch *rule.Reason {
	case apiextensionsv1.FieldValueForbidden:
		return field.Forbidden(path, detail)
	case apiextensionsv1.FieldValueRequired:
		return field.Required(path, detail)
	case apiextensionsv1.FieldValueDuplicate:
		return field.Duplicate(path, value)
	}
	return field.Invalid(path, value, detail)
}

// ruleText names a rule in errors: its message, or its expression.
func ruleText(rule apiextensionsv1.ValidationRule) string {
	if m := strings.TrimSpace(rule.Message); m != "" {
		return m
	}
	return strings.TrimSpace(rule.Rule)
}

// activation resolves a rule's self; oldSelf is unset on create.
type activation struct{ self ref.Val }

func (a activation) ResolveName(name string) (any, bool) {
	if name == cel.ScopedVarName {
		return a.self, true
	}
	return nil, false
}

func (activation) Parent() interpreter.Activation { return nil }

// schemaView is a schema as CEL values see it, with the views of its
// properties, items and additional properties made once rather than on
// every access. The other methods are model.Structural's.
type schemaView struct {
	*model.Structural
	s          *schema.Structural
	properties map[string]common.Schema
	items      common.Schema
	additional common.SchemaOrBool
}

func newSchemaView(s *schema.Structural) *schemaView {
	v := &schemaView{Structural: &model.Structural{Structural: s}, s: s}
	if s.Properties != nil {
		v.properties = make(map[string]common.Schema, len(s.Properties))
		for name, prop := range s.Properties {
			v.properties[name] = newSchemaView(&prop)
		}
	}
	if s.Items != nil {
		v.items = newSchemaView(s.Items)
	}
	if s.AdditionalProperties != nil {
		or := &schemaOrBool{allows: s.AdditionalProperties.Bool}
		if s.AdditionalProperties.Structural != nil {
			or.schema = newSchemaView(s.AdditionalProperties.Structural)
		}
		v.additional = or
	}
	return v
}

func (v *schemaView) Properties() map[string]common.Schema { return v.properties }

// Items returns an untyped nil when there are none, as model.Structural
// does: callers compare the interface with nil.
func (v *schemaView) Items() common.Schema {
	if v.items == nil {
		return nil
	}
	return v.items
}

func (v *schemaView) AdditionalProperties() common.SchemaOrBool {
	if v.additional == nil {
		return nil
	}
	return v.additional
}

// WithTypeAndObjectMeta is only reached for embedded resources, which
// walkable leaves to the apiextensions Validator; it is here to be
// complete.
func (v *schemaView) WithTypeAndObjectMeta() common.Schema {
	return newSchemaView(model.WithTypeAndObjectMeta(v.s))
}

type schemaOrBool struct {
	schema common.Schema
	allows bool
}

func (o *schemaOrBool) Schema() common.Schema { return o.schema }
func (o *schemaOrBool) Allows() bool          { return o.allows }
