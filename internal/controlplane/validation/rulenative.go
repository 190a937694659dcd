// The list-uniqueness rules, in O(n).
//
// The rules that keep a Gateway's or ListenerSet's listeners apart are
// written self.all(l1, self.exists_one(l2, ...)): n² evaluations, 4,096 for
// the 64 listeners a list may hold, for each of the two rules. A native
// check tells in one pass over a map that every listener is the only one
// of its key, which is the rule holding. It stands in for the rule only
// then; a list it cannot vouch for (a key repeated, a field absent or of
// another type) is evaluated by the rule, whose verdict and message stand.
//
// The rule's cost is then not known; the rule's static bound (MaxCost, at
// most the per-call limit) is taken from the budget instead, which is at
// least what the evaluation would have taken. A walk that still ends
// within the budget is the walk the evaluation would have made; one that
// runs out is made again without natives (ruleTree.validate), so that the
// budget runs out where the evaluation's would. Costs of subtrees that
// used a native are not remembered (rulememo.go).

package validation

import "strings"

// nativeRules are the natives by the rule's text.
var nativeRules = map[string]func(any) bool{
	"self.all(l1, self.exists_one(l2, l1.name == l2.name))": uniqueNames,
	"self.all(l1, self.exists_one(l2, l1.port == l2.port && l1.protocol == l2.protocol && (has(l1.hostname) && has(l2.hostname) ? l1.hostname == l2.hostname : !has(l1.hostname) && !has(l2.hostname))))": func(v any) bool {
		return uniqueListeners(v, false)
	},
	"self.all(l1, !has(l1.port) || self.exists_one(l2, has(l2.port) && l1.port == l2.port && l1.protocol == l2.protocol && (has(l1.hostname) && has(l2.hostname) ? l1.hostname == l2.hostname : !has(l1.hostname) && !has(l2.hostname))))": func(v any) bool {
		return uniqueListeners(v, true)
	},
}

// nativeFor is the native check of rule, nil when there is none.
func nativeFor(rule string) func(any) bool {
	return nativeRules[strings.TrimSpace(rule)]
}

// uniqueNames reports that every element of the list v is an object
// whose name, a string, no other element has.
func uniqueNames(v any) bool {
	list, ok := v.([]any)
	if !ok {
		return false
	}
	seen := make(map[string]bool, len(list))
	for _, e := range list {
		m, ok := e.(map[string]any)
		if !ok {
			return false
		}
		name, ok := m["name"].(string)
		if !ok || seen[name] {
			return false
		}
		seen[name] = true
	}
	return true
}

// listenerKey is what the combination rule compares: two listeners match
// when port and protocol are equal and both have the same hostname or
// neither has one.
type listenerKey struct {
	port     int64
	protocol string
	hasHost  bool
	hostname string
}

// uniqueListeners reports that no two listeners of the list v match:
// each is then the one listener exists_one finds for itself (the match is
// an equivalence). With portOptional, listeners without a port are left
// out, as the ListenerSet's rule leaves them. Every field the rule reads
// must be there with its type.
func uniqueListeners(v any, portOptional bool) bool {
	list, ok := v.([]any)
	if !ok {
		return false
	}
	seen := make(map[listenerKey]bool, len(list))
	for _, e := range list {
		m, ok := e.(map[string]any)
		if !ok {
			return false
		}
		p, has := m["port"]
		if !has && portOptional {
			continue
		}
		port, ok := p.(int64)
		if !ok {
			return false
		}
		protocol, ok := m["protocol"].(string)
		if !ok {
			return false
		}
		k := listenerKey{port: port, protocol: protocol}
		if h, has := m["hostname"]; has {
			if k.hostname, ok = h.(string); !ok {
				return false
			}
			k.hasHost = true
		}
		if seen[k] {
			return false
		}
		seen[k] = true
	}
	return true
}
