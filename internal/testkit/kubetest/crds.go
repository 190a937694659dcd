package kubetest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
)

var crdResource = schema.GroupVersionResource{
	Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions",
}

// ApplyManifests creates every object of every *.yaml file in dir (files in
// name order, documents in file order) and waits until each
// CustomResourceDefinition among them is Established. Objects that already
// exist are left as they are.
func ApplyManifests(ctx context.Context, cfg *rest.Config, dir string) error {
	paths, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		return fmt.Errorf("manifests in %s: %w", dir, err)
	}
	// A kustomization (the experimental channel has one) lists the
	// others; it is no object of its own.
	paths = slices.DeleteFunc(paths, func(p string) bool { return filepath.Base(p) == "kustomization.yaml" })
	if len(paths) == 0 {
		return fmt.Errorf("manifests in %s: no *.yaml files", dir)
	}
	sort.Strings(paths)

	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("dynamic client: %w", err)
	}
	disc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return fmt.Errorf("discovery client: %w", err)
	}
	groups, err := restmapper.GetAPIGroupResources(disc)
	if err != nil {
		return fmt.Errorf("discovery: %w", err)
	}
	mapper := restmapper.NewDiscoveryRESTMapper(groups)

	// One goroutine per file: the API server compiles each CRD's schema and
	// CEL rules on its own, and a file's documents stay in order.
	type result struct {
		crds []string
		err  error
	}
	results := make([]result, len(paths))
	var wg sync.WaitGroup
	for i, path := range paths {
		wg.Go(func() {
			results[i].crds, results[i].err = applyFile(ctx, dyn, mapper, path)
		})
	}
	wg.Wait()
	var errs []error
	var crds []string
	for _, r := range results {
		errs = append(errs, r.err)
		crds = append(crds, r.crds...)
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	for _, name := range crds {
		if err := waitEstablished(ctx, dyn, name); err != nil {
			return err
		}
	}
	return nil
}

// applyFile creates the objects of one manifest file in order and returns
// the names of the CRDs among them.
func applyFile(ctx context.Context, dyn dynamic.Interface, mapper meta.RESTMapper, path string) ([]string, error) {
	objs, err := readManifest(path)
	if err != nil {
		return nil, err
	}
	var crds []string
	for _, obj := range objs {
		gvk := obj.GroupVersionKind()
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			return nil, fmt.Errorf("%s: %s %s: %w", path, gvk.Kind, obj.GetName(), err)
		}
		var ri dynamic.ResourceInterface = dyn.Resource(m.Resource)
		if ns := obj.GetNamespace(); ns != "" {
			ri = dyn.Resource(m.Resource).Namespace(ns)
		}
		_, err = ri.Create(ctx, obj, metav1.CreateOptions{FieldManager: "portico-kubetest"})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("%s: create %s %s: %w", path, gvk.Kind, obj.GetName(), err)
		}
		if m.Resource == crdResource {
			crds = append(crds, obj.GetName())
		}
	}
	return crds, nil
}

func readManifest(path string) ([]*unstructured.Unstructured, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read manifest: %w", err)
	}
	defer f.Close()
	dec := utilyaml.NewYAMLOrJSONDecoder(f, 64*1024)
	var objs []*unstructured.Unstructured
	for {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return objs, nil
			}
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if len(m) == 0 { // an empty document between two "---"
			continue
		}
		objs = append(objs, &unstructured.Unstructured{Object: m})
	}
}

func waitEstablished(ctx context.Context, dyn dynamic.Interface, name string) error {
	var last string
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		crd, err := dyn.Resource(crdResource).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		conds, _, _ := unstructured.NestedSlice(crd.Object, "status", "conditions")
		for _, c := range conds {
			cm, _ := c.(map[string]any)
			if cm["type"] == "Established" && cm["status"] == "True" {
				return true, nil
			}
			if cm["type"] == "NamesAccepted" && cm["status"] == "False" {
				return false, fmt.Errorf("names not accepted: %v", cm["message"])
			}
		}
		last = fmt.Sprintf("conditions %v", conds)
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("CRD %s not established (%s): %w", name, last, err)
	}
	return nil
}
