package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// writeStatusesJSON turns the YAML stream write produces into one List,
// the shape "kubectl get -o json" prints, so tools can read it with jq.
func writeStatusesJSON(stdout io.Writer, write func(io.Writer) error) error {
	var buf bytes.Buffer
	if err := write(&buf); err != nil {
		return err
	}
	items := []json.RawMessage{}
	dec := utilyaml.NewYAMLOrJSONDecoder(&buf, 4096)
	for {
		var obj json.RawMessage
		if err := dec.Decode(&obj); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return fmt.Errorf("statuses: %w", err)
		}
		if len(bytes.TrimSpace(obj)) > 0 && !bytes.Equal(bytes.TrimSpace(obj), []byte("null")) {
			items = append(items, obj)
		}
	}
	out, err := json.MarshalIndent(struct {
		APIVersion string            `json:"apiVersion"`
		Kind       string            `json:"kind"`
		Items      []json.RawMessage `json:"items"`
	}{"v1", "List", items}, "", "  ")
	if err != nil {
		return err
	}
	_, err = stdout.Write(append(out, '\n'))
	return err
}
