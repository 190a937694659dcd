package conformance

import (
	"bufio"
	"bytes"
	"fmt"
	"io/fs"
	"slices"
	"strings"

	"sigs.k8s.io/gateway-api/conformance/utils/suite"
	"sigs.k8s.io/yaml"

	"portico.dev/portico/conformance/kubelet"
)

// upstreamBase is where the suite keeps its base manifests.
const upstreamBase = "base/manifests.yaml"

// BaseManifestsPath is where the filtered base manifests are served from. It
// must differ from upstreamBase: the suite concatenates a path's contents
// across every manifest file system that has it.
const BaseManifestsPath = "portico/base-manifests.yaml"

// LeftOut is a workload of the base manifests that cannot run here.
type LeftOut struct {
	Kind, Namespace, Name string
	Reason                string
}

// baseManifests returns the suite's base manifests without the workloads
// whose images have no local binary. The suite waits for every Pod of its
// base namespaces to be Ready before any test, so a Pod that can never run
// would stop the whole suite rather than the tests that use it.
func baseManifests(upstream fs.FS, images kubelet.Images) ([]byte, []LeftOut, error) {
	data, err := fs.ReadFile(upstream, upstreamBase)
	if err != nil {
		return nil, nil, fmt.Errorf("base manifests: %w", err)
	}
	docs, err := splitDocuments(data)
	if err != nil {
		return nil, nil, fmt.Errorf("base manifests: %w", err)
	}
	var out bytes.Buffer
	var left []LeftOut
	for _, doc := range docs {
		w, err := parseWorkload(doc)
		if err != nil {
			return nil, nil, fmt.Errorf("base manifests: %w", err)
		}
		if img := w.unmapped(images); img != "" {
			left = append(left, LeftOut{Kind: w.Kind, Namespace: w.Metadata.Namespace, Name: w.Metadata.Name,
				Reason: "image " + img + " has no local binary"})
			continue
		}
		out.WriteString("---\n")
		out.Write(doc)
	}
	return out.Bytes(), left, nil
}

// imageSkips returns, for each test whose own manifests run an image
// without a local binary, why it is skipped.
func imageSkips(upstream fs.FS, tests []suite.ConformanceTest, images kubelet.Images) (map[string]string, error) {
	skips := map[string]string{}
	for _, test := range tests {
		for _, path := range test.Manifests {
			data, err := fs.ReadFile(upstream, path)
			if err != nil {
				return nil, fmt.Errorf("test %s: %w", test.ShortName, err)
			}
			docs, err := splitDocuments(data)
			if err != nil {
				return nil, fmt.Errorf("test %s: %s: %w", test.ShortName, path, err)
			}
			for _, doc := range docs {
				w, err := parseWorkload(doc)
				if err != nil {
					return nil, fmt.Errorf("test %s: %s: %w", test.ShortName, path, err)
				}
				if img := w.unmapped(images); img != "" && skips[test.ShortName] == "" {
					skips[test.ShortName] = fmt.Sprintf("%s %s/%s runs image %s, which has no local binary",
						w.Kind, w.Metadata.Namespace, w.Metadata.Name, img)
				}
			}
		}
	}
	return skips, nil
}

// workload is the part of an object that says which images it runs.
type workload struct {
	Kind     string `json:"kind"`
	Metadata struct {
		Name      string `json:"name"`
		Namespace string `json:"namespace"`
	} `json:"metadata"`
	Spec struct {
		podSpec
		Template struct {
			Spec podSpec `json:"spec"`
		} `json:"template"`
	} `json:"spec"`
}

type podSpec struct {
	Containers     []struct{ Image string } `json:"containers"`
	InitContainers []struct{ Image string } `json:"initContainers"`
}

var workloadKinds = []string{"Pod", "Deployment", "ReplicaSet", "StatefulSet", "DaemonSet", "Job"}

func parseWorkload(doc []byte) (*workload, error) {
	var w workload
	if err := yaml.Unmarshal(doc, &w); err != nil {
		return nil, err
	}
	return &w, nil
}

// unmapped returns the first image of the workload without a binary, or "".
func (w *workload) unmapped(images kubelet.Images) string {
	if !slices.Contains(workloadKinds, w.Kind) {
		return ""
	}
	spec := w.Spec.Template.Spec
	if w.Kind == "Pod" {
		spec = w.Spec.podSpec
	}
	for _, c := range append(spec.InitContainers, spec.Containers...) {
		if _, ok := images.Binary(c.Image); !ok {
			return c.Image
		}
	}
	return ""
}

// splitDocuments splits a YAML stream at its "---" lines, dropping empty
// documents.
func splitDocuments(data []byte) ([][]byte, error) {
	var docs [][]byte
	var cur bytes.Buffer
	flush := func() {
		if len(bytes.TrimSpace(stripComments(cur.Bytes()))) > 0 {
			docs = append(docs, slices.Clone(cur.Bytes()))
		}
		cur.Reset()
	}
	s := bufio.NewScanner(bytes.NewReader(data))
	s.Buffer(make([]byte, 0, 64<<10), 4<<20)
	for s.Scan() {
		line := s.Text()
		if strings.TrimRight(line, " \t") == "---" {
			flush()
			continue
		}
		cur.WriteString(line)
		cur.WriteByte('\n')
	}
	if err := s.Err(); err != nil {
		return nil, err
	}
	flush()
	return docs, nil
}

func stripComments(doc []byte) []byte {
	var out bytes.Buffer
	for line := range bytes.Lines(doc) {
		if !bytes.HasPrefix(bytes.TrimSpace(line), []byte("#")) {
			out.Write(line)
		}
	}
	return out.Bytes()
}
