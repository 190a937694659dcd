package jsoncopy

import "testing"

type object struct {
	Name  string            `json:"name"`
	Items []string          `json:"items"`
	Tags  map[string]string `json:"tags"`
	Next  *object           `json:"next,omitempty"`
}

// TestCopyIsDeep: the copy equals the original and shares none of its
// slices, maps or pointers.
func TestCopyIsDeep(t *testing.T) {
	in := &object{Name: "a", Items: []string{"x"}, Tags: map[string]string{"k": "v"}, Next: &object{Name: "b"}}
	out := Copy(in)
	out.Items[0], out.Tags["k"], out.Next.Name = "changed", "changed", "changed"
	if in.Items[0] != "x" || in.Tags["k"] != "v" || in.Next.Name != "b" {
		t.Errorf("the copy shares memory with the original: %+v", in)
	}
	if Copy[object](nil) != nil {
		t.Error("Copy(nil) is not nil")
	}
}
