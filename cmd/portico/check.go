package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"go.uber.org/zap"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
	gwxv1a1 "sigs.k8s.io/gateway-api/apisx/v1alpha1"

	"portico.dev/portico/config"
	"portico.dev/portico/internal/controlplane/clientpolicy"
	"portico.dev/portico/internal/controlplane/filesource"
	"portico.dev/portico/internal/controlplane/securitypolicy"
	"portico.dev/portico/internal/controlplane/snapshot"
	"portico.dev/portico/internal/controlplane/status"
	"portico.dev/portico/internal/controlplane/trafficpolicy"
	"portico.dev/portico/internal/controlplane/wellknown"
	"portico.dev/portico/internal/controlplane/xtrafficpolicy"
	"portico.dev/portico/internal/shared/pmap"
	"portico.dev/portico/translate"
)

// Exit codes. check's own: a CI job tells "the files are refused" from
// "they are valid, but something in them does not serve".
const (
	exitOK = 0
	// exitFailed: the command could not do its job; for check, the input
	// is refused (does not parse, or the API server would refuse it).
	exitFailed = 1
	// exitUsage: no command, or an unknown one.
	exitUsage = 2
	// exitNotServing: check's input is valid, but some object is not
	// accepted or not programmed (the summary on stderr names each).
	exitNotServing = 3
)

// errNotServing is what check returns when it printed a summary of
// objects that do not fully serve.
var errNotServing = errors.New("some objects do not fully serve")

// checkedKinds are the kinds check prints, each with the status Portico
// computes for it; the usage text and README.md name the same.
var checkedKinds = []string{"GatewayClass", "Gateway", "ListenerSet", "HTTPRoute", "GRPCRoute", "TLSRoute", "TCPRoute", "UDPRoute", "BackendTLSPolicy", "BackendTrafficPolicy",
	"SecurityPolicy", "ClientTrafficPolicy", "XBackendTrafficPolicy"}

func check(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("check", stderr)
	configPath := fs.String("config", "", "YAML file or directory of Gateway API objects")
	controller := fs.String("controller-name", string(wellknown.ControllerName), "controllerName of the GatewayClasses Portico serves")
	output := fs.String("o", "yaml", "output: yaml (the statuses, a stream of objects), json (one List of them) or config (the data plane's configuration, as YAML)")
	maxConfig := fs.Int64("max-config-bytes", filesource.DefaultMaxConfigBytes, "refuse a configuration whose files hold more bytes than this together")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *configPath == "" {
		return errors.New("--config is required")
	}
	if *output != "yaml" && *output != "json" && *output != "config" {
		return fmt.Errorf("-o: %q is not yaml, json or config", *output)
	}
	src := filesource.New(*configPath, zap.NewNop())
	src.MaxBytes = *maxConfig
	res, err := src.Snapshot()
	if err != nil {
		return err
	}
	settings := translate.Settings{ControllerName: gwv1.GatewayController(*controller)}
	out, _ := translate.Translate(settings, res, translate.Memory{})
	rep := newCheckReport(res, out.Statuses, settings.ControllerName, time.Now())
	switch *output {
	case "config":
		doc, err := config.Dump(out.Config, translate.ProbesOf(res))
		if err != nil {
			return err
		}
		if _, err := stdout.Write(doc); err != nil {
			return err
		}
	case "json":
		if err := rep.writeJSON(stdout); err != nil {
			return err
		}
	default:
		if err := rep.writeYAML(stdout); err != nil {
			return err
		}
	}
	return rep.summarize(stderr, *controller)
}

// checkDocument is one object as check prints it: what the API server
// would hold after Portico wrote status.
type checkDocument struct {
	APIVersion string        `json:"apiVersion"`
	Kind       string        `json:"kind"`
	Metadata   checkMetadata `json:"metadata"`
	Status     any           `json:"status"`
}

type checkMetadata struct {
	Name       string `json:"name"`
	Namespace  string `json:"namespace,omitempty"`
	Generation int64  `json:"generation,omitempty"`
}

// problem is one condition of one object that keeps it from serving
// fully, as the summary prints it.
type problem struct {
	kind, name, part, condition, reason, message string
}

// foreignClass is a GatewayClass whose controllerName is not the one
// Portico serves: the first mistake of a Gateway API user, which would
// otherwise show only as Gateways that never get a status.
type foreignClass struct {
	name, controller string
}

// foreignClasses lists the GatewayClasses of res that name a controller
// other than Portico's.
func foreignClasses(res *snapshot.Resources, controller gwv1.GatewayController) []foreignClass {
	var out []foreignClass
	for _, gc := range res.GatewayClasses {
		if gc.Spec.ControllerName != controller {
			out = append(out, foreignClass{name: gc.Name, controller: string(gc.Spec.ControllerName)})
		}
	}
	slices.SortFunc(out, func(a, b foreignClass) int { return strings.Compare(a.name, b.name) })
	return out
}

// foreignClassWarner returns what logs, once per class and controller
// name, each GatewayClass of a snapshot that names another controller. In
// standalone mode every object is meant for Portico: such a class is a
// mistake, not another controller's business as it is in a cluster.
func foreignClassWarner(controller gwv1.GatewayController, log *zap.Logger) func(*snapshot.Resources) {
	warned := map[foreignClass]bool{}
	return func(res *snapshot.Resources) {
		for _, c := range foreignClasses(res, controller) {
			if warned[c] {
				continue
			}
			warned[c] = true
			log.Warn("GatewayClass names another controller: Portico ignores it and its Gateways",
				zap.String("gatewayClass", c.name), zap.String("controllerName", c.controller), zap.String("porticoControllerName", string(controller)))
		}
	}
}

func (c foreignClass) warning(controller string) string {
	return fmt.Sprintf("GatewayClass %q names controller %q, not %q (--controller-name): Portico ignores it and its Gateways", c.name, c.controller, controller)
}

// checkReport is what check found: every object with its status, and
// what keeps any of them from serving.
type checkReport struct {
	docs     []checkDocument
	problems []problem
	foreign  []foreignClass
	// served counts the Gateways Portico serves.
	served int
}

// newCheckReport merges the computed statuses into every object of the
// kinds check prints, the way the status writer would, and lists the
// conditions that say an object does not serve fully.
func newCheckReport(res *snapshot.Resources, st *status.Computed, controller gwv1.GatewayController, now time.Time) *checkReport {
	ts := metav1.NewTime(now.Truncate(time.Second))
	r := &checkReport{foreign: foreignClasses(res, controller)}
	classController := map[string]gwv1.GatewayController{}
	for _, gc := range byName(res.GatewayClasses) {
		classController[gc.Name] = gc.Spec.ControllerName
		obj := gc
		if computed, ok := st.GatewayClasses.Get(gc.Name); ok {
			obj, _ = status.MergeGatewayClass(gc, computed, ts)
			r.conditions("GatewayClass", gc.Name, "", obj.Status.Conditions)
		}
		r.add("GatewayClass", gc, &obj.Status, ts)
	}
	for _, gw := range byName(res.Gateways) {
		key := nameOf(gw)
		obj := gw
		if computed, ok := st.Gateways.Get(key); ok {
			r.served++
			obj, _ = status.MergeGateway(gw, computed, ts)
			r.conditions("Gateway", key.String(), "", obj.Status.Conditions)
			for _, l := range obj.Status.Listeners {
				r.conditions("Gateway", key.String(), "listener "+string(l.Name), l.Conditions)
			}
		} else {
			r.notServed("Gateway", key.String(), classMessage(string(gw.Spec.GatewayClassName), classController, controller))
		}
		r.add("Gateway", gw, &obj.Status, ts)
	}
	for _, ls := range byName(res.ListenerSets) {
		key := nameOf(ls)
		obj := ls
		if computed, ok := st.ListenerSets.Get(key); ok {
			obj, _ = status.MergeListenerSet(ls, computed, ts)
			r.conditions("ListenerSet", key.String(), "", obj.Status.Conditions)
			for _, l := range obj.Status.Listeners {
				r.conditions("ListenerSet", key.String(), "listener "+string(l.Name), l.Conditions)
			}
		} else {
			r.notServed("ListenerSet", key.String(), "its parent is not a Gateway Portico serves")
		}
		r.add("ListenerSet", ls, &obj.Status, ts)
	}
	for _, rt := range byName(res.HTTPRoutes) {
		obj := rt
		if computed, ok := st.HTTPRoutes.Get(nameOf(rt)); ok {
			obj, _ = status.MergeHTTPRoute(rt, computed, controller, ts)
		}
		r.route("HTTPRoute", nameOf(rt), obj.Status.Parents, controller)
		r.add("HTTPRoute", rt, &obj.Status, ts)
	}
	for _, rt := range byName(res.GRPCRoutes) {
		obj := rt
		if computed, ok := st.GRPCRoutes.Get(nameOf(rt)); ok {
			obj, _ = status.MergeGRPCRoute(rt, computed, controller, ts)
		}
		r.route("GRPCRoute", nameOf(rt), obj.Status.Parents, controller)
		r.add("GRPCRoute", rt, &obj.Status, ts)
	}
	for _, rt := range byName(res.TLSRoutes) {
		obj := rt
		if computed, ok := st.TLSRoutes.Get(nameOf(rt)); ok {
			obj, _ = status.MergeTLSRoute(rt, computed, controller, ts)
		}
		r.route("TLSRoute", nameOf(rt), obj.Status.Parents, controller)
		r.add("TLSRoute", rt, &obj.Status, ts)
	}
	for _, rt := range byName(res.TCPRoutes) {
		obj := rt
		if computed, ok := st.TCPRoutes.Get(nameOf(rt)); ok {
			obj, _ = status.MergeTCPRoute(rt, computed, controller, ts)
		}
		r.route("TCPRoute", nameOf(rt), obj.Status.Parents, controller)
		r.add("TCPRoute", rt, &obj.Status, ts)
	}
	for _, rt := range byName(res.UDPRoutes) {
		obj := rt
		if computed, ok := st.UDPRoutes.Get(nameOf(rt)); ok {
			obj, _ = status.MergeUDPRoute(rt, computed, controller, ts)
		}
		r.route("UDPRoute", nameOf(rt), obj.Status.Parents, controller)
		r.add("UDPRoute", rt, &obj.Status, ts)
	}
	for _, p := range byName(res.BackendTLSPolicies) {
		obj := p
		computed, ok := st.BackendTLSPolicies.Get(nameOf(p))
		if ok || status.HasAncestorsOf(p.Status.Ancestors, controller) {
			obj, _ = status.MergeBackendTLSPolicy(p, computed, controller, ts)
		}
		// A policy no route of Portico's uses has no ancestor: that is not
		// a fault of the policy.
		for _, a := range obj.Status.Ancestors {
			if a.ControllerName == controller {
				r.conditions("BackendTLSPolicy", nameOf(p).String(), "ancestor "+refName(a.AncestorRef), a.Conditions)
			}
		}
		r.add("BackendTLSPolicy", p, &obj.Status, ts)
	}
	addPolicies(r, trafficpolicy.Kind, res.TrafficPolicies, st.TrafficPolicies, status.MergeTrafficPolicy,
		func(p *trafficpolicy.BackendTrafficPolicy) *gwv1.PolicyStatus { return &p.Status }, controller, ts)
	addPolicies(r, securitypolicy.Kind, res.SecurityPolicies, st.SecurityPolicies, status.MergeSecurityPolicy,
		func(p *securitypolicy.SecurityPolicy) *gwv1.PolicyStatus { return &p.Status }, controller, ts)
	addPolicies(r, clientpolicy.Kind, res.ClientPolicies, st.ClientPolicies, status.MergeClientPolicy,
		func(p *clientpolicy.ClientTrafficPolicy) *gwv1.PolicyStatus { return &p.Status }, controller, ts)
	addPolicies(r, xtrafficpolicy.Kind, res.XTrafficPolicies, st.XTrafficPolicies, status.MergeXTrafficPolicy,
		func(p *gwxv1a1.XBackendTrafficPolicy) *gwv1.PolicyStatus { return &p.Status }, controller, ts)
	if r.served == 0 {
		r.problems = append(r.problems, problem{kind: "Gateway", name: "-", condition: "Accepted", reason: "NoGateway",
			message: fmt.Sprintf("no Gateway of a GatewayClass of %s: Portico would serve nothing", controller)})
	}
	return r
}

// addPolicies reports each of Portico's policies of one kind with its
// ancestor entries merged as the status writer would merge them.
func addPolicies[P metav1.Object](r *checkReport, kind string, objs []P, computed pmap.Map[types.NamespacedName, []gwv1.PolicyAncestorStatus],
	merge func(P, []gwv1.PolicyAncestorStatus, gwv1.GatewayController, metav1.Time) (P, bool), statusOf func(P) *gwv1.PolicyStatus,
	controller gwv1.GatewayController, ts metav1.Time) {
	for _, p := range byName(objs) {
		obj := p
		if c, ok := computed.Get(nameOf(p)); ok {
			obj, _ = merge(p, c, controller, ts)
		}
		st := statusOf(obj)
		for _, a := range st.Ancestors {
			if a.ControllerName == controller {
				r.conditions(kind, nameOf(p).String(), "ancestor "+refName(a.AncestorRef), a.Conditions)
			}
		}
		r.add(kind, p, st, ts)
	}
}

// add appends obj with its status; a condition's lastTransitionTime that
// was never set (the CRD's default status says 1970-01-01) is the time
// of the check, as the API server would show it once written.
func (r *checkReport) add(kind string, obj metav1.Object, st any, now metav1.Time) {
	stampZeroTimes(st, now)
	apiVersion := gwv1.GroupVersion.String()
	if kind == trafficpolicy.Kind {
		apiVersion = trafficpolicy.APIVersion
	}
	if kind == securitypolicy.Kind {
		apiVersion = securitypolicy.APIVersion
	}
	if kind == xtrafficpolicy.Kind {
		apiVersion = xtrafficpolicy.APIVersion
	}
	if kind == clientpolicy.Kind {
		apiVersion = clientpolicy.APIVersion
	}
	r.docs = append(r.docs, checkDocument{
		APIVersion: apiVersion,
		Kind:       kind,
		Metadata:   checkMetadata{Name: obj.GetName(), Namespace: obj.GetNamespace(), Generation: obj.GetGeneration()},
		Status:     st,
	})
}

// stampZeroTimes sets every unset lastTransitionTime in st (a pointer to
// a status of a checked kind, which the caller owns) to now.
func stampZeroTimes(st any, now metav1.Time) {
	stamp := func(conds []metav1.Condition) {
		for i := range conds {
			if conds[i].LastTransitionTime.Unix() <= 0 {
				conds[i].LastTransitionTime = now
			}
		}
	}
	switch s := st.(type) {
	case *gwv1.GatewayClassStatus:
		s.Conditions = slices.Clone(s.Conditions)
		stamp(s.Conditions)
	case *gwv1.GatewayStatus:
		s.Conditions = slices.Clone(s.Conditions)
		stamp(s.Conditions)
		s.Listeners = slices.Clone(s.Listeners)
		for i := range s.Listeners {
			s.Listeners[i].Conditions = slices.Clone(s.Listeners[i].Conditions)
			stamp(s.Listeners[i].Conditions)
		}
	case *gwv1.ListenerSetStatus:
		s.Conditions = slices.Clone(s.Conditions)
		stamp(s.Conditions)
		s.Listeners = slices.Clone(s.Listeners)
		for i := range s.Listeners {
			s.Listeners[i].Conditions = slices.Clone(s.Listeners[i].Conditions)
			stamp(s.Listeners[i].Conditions)
		}
	case *gwv1.HTTPRouteStatus:
		s.Parents = stampParents(s.Parents, stamp)
	case *gwv1.GRPCRouteStatus:
		s.Parents = stampParents(s.Parents, stamp)
	case *gwv1.TLSRouteStatus:
		s.Parents = stampParents(s.Parents, stamp)
	case *gwv1.TCPRouteStatus:
		s.Parents = stampParents(s.Parents, stamp)
	case *gwv1.UDPRouteStatus:
		s.Parents = stampParents(s.Parents, stamp)
	case *gwv1.PolicyStatus:
		s.Ancestors = slices.Clone(s.Ancestors)
		for i := range s.Ancestors {
			s.Ancestors[i].Conditions = slices.Clone(s.Ancestors[i].Conditions)
			stamp(s.Ancestors[i].Conditions)
		}
	}
}

func stampParents(parents []gwv1.RouteParentStatus, stamp func([]metav1.Condition)) []gwv1.RouteParentStatus {
	parents = slices.Clone(parents)
	for i := range parents {
		parents[i].Conditions = slices.Clone(parents[i].Conditions)
		stamp(parents[i].Conditions)
	}
	return parents
}

// wantTrue and wantFalse are the condition types whose value says whether
// an object serves; any other type (a foreign one, SupportedVersion's
// neighbours) says nothing about it.
var (
	wantTrue  = []string{"Accepted", "Programmed", "ResolvedRefs", "SupportedVersion"}
	wantFalse = []string{"Conflicted", "PartiallyInvalid"}
)

func (r *checkReport) conditions(kind, name, part string, conds []metav1.Condition) {
	for _, c := range conds {
		bad := (slices.Contains(wantTrue, c.Type) && c.Status != metav1.ConditionTrue) ||
			(slices.Contains(wantFalse, c.Type) && c.Status != metav1.ConditionFalse)
		if bad {
			r.problems = append(r.problems, problem{kind: kind, name: name, part: part, condition: c.Type, reason: c.Reason, message: c.Message})
		}
	}
}

// notServed records an object Portico computes no status for.
func (r *checkReport) notServed(kind, name, why string) {
	r.problems = append(r.problems, problem{kind: kind, name: name, condition: "Accepted", reason: "NotServed", message: why})
}

// route records the conditions of Portico's parent entries of a route, or
// that it has none: none of its parents is Portico's.
func (r *checkReport) route(kind string, key types.NamespacedName, parents []gwv1.RouteParentStatus, controller gwv1.GatewayController) {
	ours := 0
	for _, p := range parents {
		if p.ControllerName != controller {
			continue
		}
		ours++
		r.conditions(kind, key.String(), "parent "+refName(p.ParentRef), p.Conditions)
	}
	if ours == 0 {
		r.notServed(kind, key.String(), "none of its parentRefs is a Gateway or ListenerSet Portico serves")
	}
}

func classMessage(class string, classController map[string]gwv1.GatewayController, controller gwv1.GatewayController) string {
	c, ok := classController[class]
	if !ok {
		return fmt.Sprintf("its GatewayClass %q does not exist", class)
	}
	return fmt.Sprintf("its GatewayClass %q names controller %q, not %q", class, c, controller)
}

func refName(ref gwv1.ParentReference) string {
	kind := "Gateway"
	if ref.Kind != nil {
		kind = string(*ref.Kind)
	}
	name := string(ref.Name)
	if ref.Namespace != nil {
		name = string(*ref.Namespace) + "/" + name
	}
	if ref.SectionName != nil {
		name += "/" + string(*ref.SectionName)
	}
	return kind + " " + name
}

func nameOf(o metav1.Object) types.NamespacedName {
	return types.NamespacedName{Namespace: o.GetNamespace(), Name: o.GetName()}
}

func byName[T metav1.Object](in []T) []T {
	out := slices.Clone(in)
	slices.SortFunc(out, func(a, b T) int {
		if c := strings.Compare(a.GetNamespace(), b.GetNamespace()); c != 0 {
			return c
		}
		return strings.Compare(a.GetName(), b.GetName())
	})
	return out
}

// writeYAML prints the objects as a YAML stream, in the order of
// checkedKinds, each sorted by namespace and name.
func (r *checkReport) writeYAML(w io.Writer) error {
	for i, d := range r.docs {
		b, err := marshalYAML(d)
		if err != nil {
			return err
		}
		if i > 0 {
			if _, err := io.WriteString(w, "---\n"); err != nil {
				return err
			}
		}
		if _, err := w.Write(b); err != nil {
			return err
		}
	}
	return nil
}

// writeJSON prints the objects as one List, the shape "kubectl get -o
// json" prints, so tools can read it with jq.
func (r *checkReport) writeJSON(w io.Writer) error {
	items := r.docs
	if items == nil {
		items = []checkDocument{}
	}
	out, err := json.MarshalIndent(struct {
		APIVersion string          `json:"apiVersion"`
		Kind       string          `json:"kind"`
		Items      []checkDocument `json:"items"`
	}{"v1", "List", items}, "", "  ")
	if err != nil {
		return err
	}
	_, err = w.Write(append(out, '\n'))
	return err
}

// summarize writes the warnings and the table of problems to w, and
// returns errNotServing when there is any.
func (r *checkReport) summarize(w io.Writer, controller string) error {
	for _, c := range r.foreign {
		fmt.Fprintf(w, "warning: %s\n", c.warning(controller))
	}
	if len(r.problems) == 0 {
		fmt.Fprintf(w, "%d objects checked: every one is accepted and programmed\n", len(r.docs))
		return nil
	}
	if len(r.docs) == 0 {
		fmt.Fprintln(w, "no objects to check:")
	} else {
		fmt.Fprintf(w, "%d of %d objects do not fully serve:\n", r.objectsWithProblems(), len(r.docs))
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "KIND\tNAME\tCONDITION\tREASON\tMESSAGE")
	for _, p := range r.problems {
		name := p.name
		if p.part != "" {
			name += " (" + p.part + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", p.kind, name, p.condition, p.reason, oneLine(p.message))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	return errNotServing
}

func (r *checkReport) objectsWithProblems() int {
	seen := map[[2]string]bool{}
	for _, p := range r.problems {
		if p.name != "-" {
			seen[[2]string{p.kind, p.name}] = true
		}
	}
	return len(seen)
}

func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}
