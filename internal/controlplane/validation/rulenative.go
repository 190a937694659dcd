// Native checks of the rules over lists.
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

	// The rules of each listener's protocol, tls and hostname: cheap
	// each, but evaluated for every listener of every Gateway and
	// ListenerSet, whose lists rarely repeat (their hostnames differ).
	"self.all(l, l.protocol in ['HTTP', 'TCP', 'UDP'] ? !has(l.tls) : true)": everyListener(func(l listener) bool {
		return !l.is("HTTP", "TCP", "UDP") || !l.hasTLS
	}),
	"self.all(l, (l.protocol == 'HTTPS' && has(l.tls)) ? (l.tls.mode == '' || l.tls.mode == 'Terminate') : true)": everyListener(func(l listener) bool {
		return !l.is("HTTPS") || !l.hasTLS || l.hasMode && (l.mode == "" || l.mode == "Terminate")
	}),
	"self.all(l, (l.protocol == 'TLS' ? has(l.tls) && has(l.tls.mode) && l.tls.mode != '' : true))": everyListener(func(l listener) bool {
		return !l.is("TLS") || l.hasTLS && l.hasMode && l.mode != ""
	}),
	"self.all(l, l.protocol in ['TCP', 'UDP']  ? (!has(l.hostname) || l.hostname == '') : true)": everyListener(func(l listener) bool {
		return !l.is("TCP", "UDP") || !l.hasHost || l.hostname == ""
	}),

	// A route's parentRefs: two rules over every pair of them, for every
	// route, whose lists rarely repeat.
	"self.all(p1, self.all(p2, p1.group == p2.group && p1.kind == p2.kind && p1.name == p2.name && (((!has(p1.__namespace__) || p1.__namespace__ == '') && (!has(p2.__namespace__) || p2.__namespace__ == '')) || (has(p1.__namespace__) && has(p2.__namespace__) && p1.__namespace__ == p2.__namespace__)) ? ((!has(p1.sectionName) || p1.sectionName == '') == (!has(p2.sectionName) || p2.sectionName == '') && (!has(p1.port) || p1.port == 0) == (!has(p2.port) || p2.port == 0)): true))":                                                                                                                                                       parentRefsAlike,
	"self.all(p1, self.exists_one(p2, p1.group == p2.group && p1.kind == p2.kind && p1.name == p2.name && (((!has(p1.__namespace__) || p1.__namespace__ == '') && (!has(p2.__namespace__) || p2.__namespace__ == '')) || (has(p1.__namespace__) && has(p2.__namespace__) && p1.__namespace__ == p2.__namespace__ )) && (((!has(p1.sectionName) || p1.sectionName == '') && (!has(p2.sectionName) || p2.sectionName == '')) || ( has(p1.sectionName) && has(p2.sectionName) && p1.sectionName == p2.sectionName)) && (((!has(p1.port) || p1.port == 0) && (!has(p2.port) || p2.port == 0)) || (has(p1.port) && has(p2.port) && p1.port == p2.port))))": parentRefsUnique,
}

// listener is what the per-listener rules read of a listener.
type listener struct {
	protocol        string
	hasTLS, hasMode bool
	mode            string
	hasHost         bool
	hostname        string
}

func (l listener) is(protocols ...string) bool {
	for _, p := range protocols {
		if l.protocol == p {
			return true
		}
	}
	return false
}

// everyListener is the native of a rule self.all(l, ...) over listeners
// that holds when ok holds for each. Every field the rules read must be
// there with its type, where it is: a string protocol, a tls object with
// a string mode, a string hostname; the rule decides any other list.
func everyListener(ok func(listener) bool) func(any) bool {
	return func(v any) bool {
		list, isList := v.([]any)
		if !isList {
			return false
		}
		for _, e := range list {
			m, isMap := e.(map[string]any)
			if !isMap {
				return false
			}
			var l listener
			var typed bool
			if l.protocol, typed = m["protocol"].(string); !typed {
				return false
			}
			if t, has := m["tls"]; has {
				tls, isMap := t.(map[string]any)
				if !isMap {
					return false
				}
				l.hasTLS = true
				if mode, has := tls["mode"]; has {
					if l.mode, typed = mode.(string); !typed {
						return false
					}
					l.hasMode = true
				}
			}
			if h, has := m["hostname"]; has {
				if l.hostname, typed = h.(string); !typed {
					return false
				}
				l.hasHost = true
			}
			if !ok(l) {
				return false
			}
		}
		return true
	}
}

// parentKey is what the parentRefs rules compare of a parentRef, an
// absent namespace and sectionName read as empty, an absent port as 0.
type parentKey struct {
	group, kind, name, namespace, sectionName string
	port                                      int64
}

// parentKeys are the keys of the list v; ok is false unless every
// element is an object with string group, kind and name, and namespace,
// sectionName (strings) and port (an integer) absent or of their type.
func parentKeys(v any) ([]parentKey, bool) {
	list, isList := v.([]any)
	if !isList {
		return nil, false
	}
	keys := make([]parentKey, len(list))
	for i, e := range list {
		m, isMap := e.(map[string]any)
		if !isMap {
			return nil, false
		}
		k := &keys[i]
		var ok1, ok2, ok3 bool
		k.group, ok1 = m["group"].(string)
		k.kind, ok2 = m["kind"].(string)
		k.name, ok3 = m["name"].(string)
		if !ok1 || !ok2 || !ok3 {
			return nil, false
		}
		if x, has := m["namespace"]; has {
			if k.namespace, ok1 = x.(string); !ok1 {
				return nil, false
			}
		}
		if x, has := m["sectionName"]; has {
			if k.sectionName, ok1 = x.(string); !ok1 {
				return nil, false
			}
		}
		if x, has := m["port"]; has {
			p, isInt := x.(int64)
			if !isInt {
				return nil, false
			}
			k.port = p
		}
	}
	return keys, true
}

// parentRefsAlike: of two parentRefs to the same parent, both name a
// section or neither does, and both a port or neither does.
func parentRefsAlike(v any) bool {
	keys, ok := parentKeys(v)
	if !ok {
		return false
	}
	for _, a := range keys {
		for _, b := range keys {
			if a.group == b.group && a.kind == b.kind && a.name == b.name && a.namespace == b.namespace &&
				((a.sectionName == "") != (b.sectionName == "") || (a.port == 0) != (b.port == 0)) {
				return false
			}
		}
	}
	return true
}

// parentRefsUnique: no two parentRefs are the same (every one is then
// the one exists_one finds for itself).
func parentRefsUnique(v any) bool {
	keys, ok := parentKeys(v)
	if !ok {
		return false
	}
	seen := make(map[parentKey]bool, len(keys))
	for _, k := range keys {
		if seen[k] {
			return false
		}
		seen[k] = true
	}
	return true
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
