package filesource

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"maps"
	"regexp"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	certv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
	gwxv1a1 "sigs.k8s.io/gateway-api/apisx/v1alpha1"
	"sigs.k8s.io/yaml"

	"portico.dev/portico/internal/controlplane/clientpolicy"
	"portico.dev/portico/internal/controlplane/parameters"
	"portico.dev/portico/internal/controlplane/securitypolicy"
	"portico.dev/portico/internal/controlplane/trafficpolicy"
	"portico.dev/portico/internal/controlplane/validation"
	"portico.dev/portico/internal/controlplane/xtrafficpolicy"
)

// Document is one object read from a YAML stream, with where it came from.
type Document struct {
	File   string
	Index  int // 1-based position of the document in its file
	Line   int // the line of the file it starts on (0: not known)
	Object metav1.Object
	// sum is the hash of the document's bytes: the next read of its file
	// keeps Object for a document with the same bytes (Decode's reuse).
	sum [sha256.Size]byte
	// spec is the hash of the object's spec (specHash) until the source
	// stamped the object with its generation; nil then, or when it could
	// not be made as the object was decoded.
	spec *[sha256.Size]byte
}

// DecodeError names the file and document a decode failure is about.
type DecodeError struct {
	File  string
	Index int
	Line  int // of the file, when known: where the document or the field is
	Err   error
}

func (e *DecodeError) Error() string {
	switch {
	case e.Index == 0:
		return fmt.Sprintf("%s: %v", e.File, e.Err)
	case e.Line == 0:
		return fmt.Sprintf("%s: document %d: %v", e.File, e.Index, e.Err)
	}
	return fmt.Sprintf("%s:%d: document %d: %v", e.File, e.Line, e.Index, e.Err)
}

func (e *DecodeError) Unwrap() error { return e.Err }

// kinds maps apiVersion+kind to a constructor of the typed object. Only the
// kinds a cluster would hand Portico are accepted; anything else is an error
// so a typo never silently drops an object.
func newObject(apiVersion, kind string) (metav1.Object, error) {
	switch apiVersion + "/" + kind {
	case "gateway.networking.k8s.io/v1/GatewayClass", "gateway.networking.k8s.io/v1beta1/GatewayClass":
		return &gwv1.GatewayClass{}, nil
	case "gateway.networking.k8s.io/v1/Gateway", "gateway.networking.k8s.io/v1beta1/Gateway":
		return &gwv1.Gateway{}, nil
	case "gateway.networking.k8s.io/v1/ListenerSet":
		return &gwv1.ListenerSet{}, nil
	case "gateway.networking.k8s.io/v1/HTTPRoute", "gateway.networking.k8s.io/v1beta1/HTTPRoute":
		return &gwv1.HTTPRoute{}, nil
	case "gateway.networking.k8s.io/v1/GRPCRoute":
		return &gwv1.GRPCRoute{}, nil
	case "gateway.networking.k8s.io/v1/TLSRoute", "gateway.networking.k8s.io/v1alpha2/TLSRoute":
		return &gwv1.TLSRoute{}, nil
	case "gateway.networking.k8s.io/v1/TCPRoute", "gateway.networking.k8s.io/v1alpha2/TCPRoute":
		// v1alpha2's rules are v1's, with up to 16 of them; admission
		// checks each version against its own schema.
		return &gwv1.TCPRoute{}, nil
	case "gateway.networking.k8s.io/v1/UDPRoute", "gateway.networking.k8s.io/v1alpha2/UDPRoute":
		// As for TCPRoute: v1alpha2's rules are v1's.
		return &gwv1.UDPRoute{}, nil
	case "gateway.networking.k8s.io/v1/ReferenceGrant", "gateway.networking.k8s.io/v1beta1/ReferenceGrant":
		// v1beta1 and v1 ReferenceGrants have the same schema.
		return &gwv1.ReferenceGrant{}, nil
	case "gateway.networking.k8s.io/v1/BackendTLSPolicy":
		return &gwv1.BackendTLSPolicy{}, nil
	case xtrafficpolicy.APIVersion + "/" + xtrafficpolicy.Kind:
		// Admitted by the experimental channel's CRD, as other Gateway
		// API kinds are; the rest is checked where it is used.
		return &gwxv1a1.XBackendTrafficPolicy{}, nil
	case "v1/ConfigMap":
		return &corev1.ConfigMap{}, nil
	case "certificates.k8s.io/v1/ClusterTrustBundle", "certificates.k8s.io/v1beta1/ClusterTrustBundle":
		// v1beta1's fields are v1's.
		return &certv1.ClusterTrustBundle{}, nil
	case "v1/Namespace":
		return &corev1.Namespace{}, nil
	case "v1/Secret":
		return &corev1.Secret{}, nil
	case "v1/Service":
		return &corev1.Service{}, nil
	case "discovery.k8s.io/v1/EndpointSlice":
		return &discoveryv1.EndpointSlice{}, nil
	case parameters.APIVersion + "/" + parameters.Kind:
		// Its rules beyond the schema's types are checked where it is
		// used (parameters.Spec.Validate), as in a cluster.
		return &parameters.PorticoParameters{}, nil
	case trafficpolicy.APIVersion + "/" + trafficpolicy.Kind:
		// Like PorticoParameters: checked where it is used
		// (trafficpolicy.Spec.Validate), and refused there with a status.
		return &trafficpolicy.BackendTrafficPolicy{}, nil
	case securitypolicy.APIVersion + "/" + securitypolicy.Kind:
		// Likewise (securitypolicy.Spec.Validate).
		return &securitypolicy.SecurityPolicy{}, nil
	case clientpolicy.APIVersion + "/" + clientpolicy.Kind:
		// Like BackendTrafficPolicy: checked where it is used.
		return &clientpolicy.ClientTrafficPolicy{}, nil
	}
	return nil, fmt.Errorf("unsupported kind %q (apiVersion %q)", kind, apiVersion)
}

// Decode reads a multi-document YAML stream. Empty documents are skipped;
// unknown fields are errors. Every object is admitted as the API server
// would: it gets its kind's schema defaults and is refused when it breaks a
// rule the API server enforces (admission), so standalone mode serves what a
// cluster would hold and nothing a cluster would refuse.
func Decode(file string, r io.Reader, admit *validation.Checker) ([]Document, error) {
	chunks, _, _, err := readChunks(r)
	if err != nil {
		return nil, &DecodeError{File: file, Err: err}
	}
	return decode(file, chunks, admit, nil)
}

// decode is Decode keeping, for each document whose bytes hash to a key
// of reuse, that object instead of decoding and admitting the document
// again. reuse holds the objects of the same file's last version: the
// file source put what it gives every object (a namespace, a creation
// time, a generation) in place already, and hands them out again as the
// same pointers, which translate takes for "unchanged". At 100,000
// hostnames in a few large files, a change of one site would otherwise
// admit thousands of objects again. data is the file in chunks
// (readChunks); no decoded object refers to its bytes, and each document's
// bytes are dropped once decoded, so that the chunks go to the collector
// as the decode goes.
func decode(file string, data [][]byte, admit *validation.Checker, reuse map[[sha256.Size]byte]metav1.Object) ([]Document, error) {
	split, splitErr := splitChunks(data)
	clear(data) // the documents hold what is left to decode
	var raws [][]byte
	var indexes, lines []int
	for _, d := range split {
		if blankDocument(d.raw) {
			continue
		}
		raws = append(raws, d.raw)
		indexes = append(indexes, len(raws))
		lines = append(lines, d.line)
	}
	clear(split) // raws holds the same, and drops each once decoded
	if splitErr != nil {
		return nil, &DecodeError{File: file, Index: len(raws) + 1, Err: splitErr}
	}
	sums := make([][sha256.Size]byte, len(raws))
	objs := make([]metav1.Object, len(raws))
	var fresh []int // the documents to decode
	for i, raw := range raws {
		sums[i] = sha256.Sum256(raw)
		if obj, ok := reuse[sums[i]]; ok {
			objs[i], raws[i] = obj, nil
			continue
		}
		fresh = append(fresh, i)
	}
	errs := make([]error, len(raws))
	specs := make([]specOf, len(raws))
	decodeAll(raws, fresh, objs, specs, errs, admit)
	docs := make([]Document, len(raws))
	for i := range raws {
		// The first failing document in file order is reported, whichever
		// worker got to it first.
		if errs[i] != nil {
			line := lines[i]
			if l, ok := errors.AsType[*located](errs[i]); ok {
				line += l.line - 1
			}
			return nil, &DecodeError{File: file, Index: indexes[i], Line: line, Err: errs[i]}
		}
		docs[i] = Document{File: file, Index: indexes[i], Line: lines[i], Object: objs[i], sum: sums[i]}
		if specs[i].ok {
			docs[i].spec = &specs[i].hash
		}
	}
	return docs, nil
}

// specOf is the hash of a decoded object's spec (specHash).
type specOf struct {
	hash [sha256.Size]byte
	ok   bool
}

// decodeAll decodes and admits the documents of raws that which lists,
// into objs and errs, on every core: admission (the CRDs' schema and CEL
// rules) costs far more than parsing, and a file of thousands of objects
// is the common case of a large configuration.
func decodeAll(raws [][]byte, which []int, objs []metav1.Object, specs []specOf, errs []error, admit *validation.Checker) {
	var next atomic.Int64
	var wg sync.WaitGroup
	plans := newJSONPlans()
	for range min(runtime.GOMAXPROCS(0), len(which)) {
		wg.Go(func() {
			for k := int(next.Add(1) - 1); k < len(which); k = int(next.Add(1) - 1) {
				i := which[k]
				objs[i], errs[i] = decodeOne(raws[i], admit, plans)
				raws[i] = nil // its chunk may go
				if errs[i] == nil {
					foldStringData(objs[i])
					if objs[i].GetGeneration() == 0 {
						specs[i].hash, specs[i].ok = specHash(objs[i])
					}
				}
			}
		})
	}
	wg.Wait()
}

func decodeOne(raw []byte, admit *validation.Checker, plans *jsonPlans) (metav1.Object, error) {
	if obj, tm, ok := decodeScanned(raw, plans); ok {
		return admitted(obj, &tm, admit)
	}
	return decodeParsed(raw, admit)
}

// decodeScanned decodes raw parsing its YAML once: its apiVersion and kind
// are read off its top-level lines (typedMeta) to pick the type the strict
// decoding needs. ok is false when the lines do not say, or when the
// decoded object's own apiVersion and kind differ from what they said (a
// line that only looked like a top-level key, inside a quoted scalar):
// decodeParsed then decodes raw the long way, which also words every error.
func decodeScanned(raw []byte, plans *jsonPlans) (metav1.Object, metav1.TypeMeta, bool) {
	tm, ok := typeMeta(raw)
	if !ok {
		return nil, tm, false
	}
	obj, err := newObject(tm.APIVersion, tm.Kind)
	if err != nil {
		return nil, tm, false
	}
	if err := unmarshalStrict(raw, obj, plans); err != nil || obj.GetName() == "" {
		return nil, tm, false
	}
	typed, ok := obj.(interface{ GetObjectKind() schema.ObjectKind })
	if !ok {
		return nil, tm, false
	}
	got := typed.GetObjectKind().GroupVersionKind()
	if got.Kind != tm.Kind || got.GroupVersion().String() != tm.APIVersion {
		return nil, tm, false
	}
	return obj, tm, true
}

// typeMeta reads apiVersion and kind from the lines of raw that start, in
// the first column, with "apiVersion:" or "kind:" followed by a plain or
// simply quoted scalar: the top-level keys of a document in block style.
// ok is false unless each key is found once with such a value.
func typeMeta(raw []byte) (tm metav1.TypeMeta, ok bool) {
	var seenVersion, seenKind int
	for line := range bytes.Lines(raw) {
		var dst *string
		var rest []byte
		switch {
		case bytes.HasPrefix(line, []byte("apiVersion:")):
			dst, rest = &tm.APIVersion, line[len("apiVersion:"):]
			seenVersion++
		case bytes.HasPrefix(line, []byte("kind:")):
			dst, rest = &tm.Kind, line[len("kind:"):]
			seenKind++
		default:
			continue
		}
		v, ok := plainScalar(rest)
		if !ok {
			return tm, false
		}
		*dst = v
	}
	return tm, seenVersion == 1 && seenKind == 1
}

// plainScalar is the value after a key's colon when it is a word of the
// characters apiVersions and kinds are made of, maybe quoted, maybe
// followed by a comment.
func plainScalar(rest []byte) (string, bool) {
	if len(rest) == 0 || (rest[0] != ' ' && rest[0] != '\t') {
		return "", false
	}
	v := bytes.TrimSpace(rest)
	if i := bytes.Index(v, []byte(" #")); i >= 0 {
		v = bytes.TrimSpace(v[:i])
	}
	if n := len(v); n >= 2 && (v[0] == '"' || v[0] == '\'') && v[n-1] == v[0] {
		v = v[1 : n-1]
	}
	if len(v) == 0 {
		return "", false
	}
	for _, c := range v {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '.', c == '/', c == '-':
		default:
			return "", false
		}
	}
	return string(v), true
}

// yamlLine is how the YAML parser places a syntax error: "yaml: line N:
// what", N counted from the document's first line.
var yamlLine = regexp.MustCompile(`yaml: line (\d+): (.*)$`)

// syntaxError words a YAML parser's failure as "invalid YAML: what", at
// its line of the document, without the converter's "error converting
// YAML to JSON" around it.
func syntaxError(err error) error {
	m := yamlLine.FindStringSubmatch(err.Error())
	if m == nil {
		return fmt.Errorf("invalid YAML: %w", err)
	}
	line, _ := strconv.Atoi(m[1]) // digits
	return &located{line: line, err: fmt.Errorf("invalid YAML: %s", m[2])}
}

// decodeParsed decodes raw reading its apiVersion and kind with a YAML
// parser first.
func decodeParsed(raw []byte, admit *validation.Checker) (metav1.Object, error) {
	var tm metav1.TypeMeta
	if err := yaml.Unmarshal(raw, &tm); err != nil {
		return nil, syntaxError(err)
	}
	if tm.Kind == "" || tm.APIVersion == "" {
		return nil, errors.New("apiVersion and kind are required")
	}
	obj, err := newObject(tm.APIVersion, tm.Kind)
	if err != nil {
		return nil, err
	}
	if err := yaml.UnmarshalStrict(raw, obj); err != nil {
		if described := describe(raw, &tm, obj); described != nil {
			return nil, described
		}
		return nil, fmt.Errorf("%s: %w", tm.Kind, err)
	}
	if obj.GetName() == "" {
		return nil, fmt.Errorf("%s: metadata.name is required", tm.Kind)
	}
	return admitted(obj, &tm, admit)
}

// admitted decodes raw again after giving it the defaults of its kind, as
// the API server stores it, and checks it. raw has passed the strict typed
// decoding, so its fields are all known.
func admitted(obj metav1.Object, tm *metav1.TypeMeta, admit *validation.Checker) (metav1.Object, error) {
	if !admit.HasSchema(tm.APIVersion, tm.Kind) {
		// A core kind: no defaults, and rules on the typed object alone.
		// What a JSON round trip would do: times are stored in seconds.
		if ts := obj.GetCreationTimestamp(); ts.Nanosecond() != 0 {
			obj.SetCreationTimestamp(metav1.NewTime(ts.Truncate(time.Second)))
		}
		if err := admit.Check(tm.APIVersion, tm.Kind, nil, obj); err != nil {
			return nil, err
		}
		return obj, nil
	}
	fields, err := defaulted(obj, tm, admit)
	if err != nil {
		return nil, err
	}
	if err := admit.Check(tm.APIVersion, tm.Kind, fields, obj); err != nil {
		return nil, err
	}
	return obj, nil
}

// defaulted gives obj the defaults of its kind's schema and returns its
// fields as Check reads them (no status). The conversions between the
// typed object and its fields are those of a JSON round trip, without the
// JSON (TestDefaultedMatchesJSONRoundTrip).
func defaulted(obj metav1.Object, tm *metav1.TypeMeta, admit *validation.Checker) (map[string]any, error) {
	// The fields come from the typed object rather than from the YAML:
	// the strict typed decoding already read each scalar by its field's
	// type (a listener named "on" is a name, not YAML 1.1's true).
	fields, err := kruntime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", tm.Kind, err)
	}
	// The API server neither defaults nor checks the status of an object
	// it creates; whatever status the file holds stays as it is.
	status, hasStatus := fields["status"]
	delete(fields, "status")
	if err := admit.Default(tm.APIVersion, tm.Kind, fields); err != nil {
		return nil, fmt.Errorf("%s: defaults: %w", tm.Kind, err)
	}
	// The defaulted object, from the defaulted fields and the status.
	withStatus := maps.Clone(fields)
	if hasStatus {
		withStatus["status"] = status
	}
	if err := kruntime.DefaultUnstructuredConverter.FromUnstructured(withStatus, obj); err != nil {
		return nil, fmt.Errorf("%s: %w", tm.Kind, err)
	}
	return fields, nil
}

// foldStringData folds a Secret's stringData into its data, as the API
// server does on write, so that YAML can carry readable PEM.
func foldStringData(obj metav1.Object) {
	o, ok := obj.(*corev1.Secret)
	if !ok || len(o.StringData) == 0 {
		return
	}
	data := make(map[string][]byte, len(o.Data)+len(o.StringData))
	for k, v := range o.Data {
		data[k] = v
	}
	for k, v := range o.StringData {
		data[k] = []byte(v)
	}
	o.Data, o.StringData = data, nil
}

// blankDocument is whether raw holds nothing but white space and
// comment-only lines.
func blankDocument(raw []byte) bool {
	for line := range bytes.Lines(raw) {
		if t := bytes.TrimSpace(line); len(t) > 0 && t[0] != '#' {
			return false
		}
	}
	return true
}
