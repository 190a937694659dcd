package translate

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"portico.dev/portico/internal/controlplane/validation"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"portico.dev/portico/internal/controlplane/filesource"
)

// FuzzTranslate feeds standalone YAML through decode, assemble and
// translate, the path a file edit takes. Input may be refused at decode or
// assemble, as a broken edit is; whatever gets through must translate
// without a panic, and translate must be a function of its input: the
// same snapshot through the same translator again (its caches) and
// through a new one gives the same statuses and data plane.
func FuzzTranslate(f *testing.F) {
	var seeds []string
	for _, pattern := range []string{"testdata/*.in.yaml", "testdata/*/*.yaml", "../examples/standalone/*.yaml"} {
		m, err := filepath.Glob(pattern)
		if err != nil {
			f.Fatal(err)
		}
		seeds = append(seeds, m...)
	}
	if len(seeds) == 0 {
		f.Fatal("no seed files")
	}
	for _, p := range seeds {
		raw, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(raw)
	}
	admit, err := validation.New()
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		// A slow input is a finding too: crash the worker, which makes the
		// fuzzer keep the input.
		done := make(chan struct{})
		defer close(done)
		go func() {
			select {
			case <-done:
			case <-time.After(20 * time.Second):
				panic(fmt.Sprintf("over 20s on this input:\n%q", raw))
			}
		}()
		docs, err := filesource.Decode("fuzz.yaml", bytes.NewReader(raw), admit)
		if err != nil {
			return
		}
		res, err := fixedSource("fuzz.yaml").Assemble(docs)
		if err != nil {
			return
		}
		tr := newTranslator()
		translate := func(tr *translator) string {
			out, err := yaml.Marshal(toGolden(tr.Translate(res)))
			if err != nil {
				t.Fatal(err)
			}
			return string(out)
		}
		first := translate(tr)
		if again := translate(tr); again != first {
			t.Fatalf("a second translate of the same input differs:\n%s", lineDiff(first, again))
		}
		if fresh := translate(newTranslator()); fresh != first {
			t.Fatalf("a new translator's output differs:\n%s", lineDiff(first, fresh))
		}
	})
}
