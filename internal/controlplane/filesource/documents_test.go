package filesource

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

// A file read in chunks splits into the documents, lines and errors it
// splits into read whole, whatever the chunks: documents across chunks,
// separators first in a chunk, lines longer than a chunk.
func TestSplitChunksMatchesSplitDocuments(t *testing.T) {
	var b strings.Builder
	for i := range 3000 {
		switch i % 7 {
		case 0:
			b.WriteString("---\n")
		case 1:
			b.WriteString("--- # comment\n\n")
		case 2:
			fmt.Fprintf(&b, "kind: Secret\ndata:\n  k: %s\n", strings.Repeat("x", 700*i%5000))
		case 3:
			b.WriteString("# only a comment\n")
		default:
			fmt.Fprintf(&b, "metadata:\n  name: n%d\n", i)
		}
	}
	b.WriteString("---\n" + strings.Repeat("y", 3*chunkSize) + "\nlast: without newline")
	streams := []string{b.String(), "", "\n", "---", "a: 1\n---\nb: 2", b.String()[:5000] + "--- x\nc: 3\n"}
	rng := rand.New(rand.NewPCG(1, 2))
	for si, s := range streams {
		want, wantErr := splitDocuments([]byte(s))
		chunks, sum, size, err := readChunks(strings.NewReader(s))
		if err != nil || sum != sha256.Sum256([]byte(s)) || size != int64(len(s)) || string(bytes.Join(chunks, nil)) != s {
			t.Fatalf("stream %d: readChunks: %v; the chunks are not the stream", si, err)
		}
		for k, c := range chunks[:max(len(chunks)-1, 0)] {
			if c[len(c)-1] != '\n' {
				t.Fatalf("stream %d: chunk %d does not end a line", si, k)
			}
		}
		// Other chunkings at line ends, down to a line a chunk.
		lines := bytes.SplitAfter([]byte(s), []byte("\n"))
		for try := range 20 {
			var cs [][]byte
			for i := 0; i < len(lines); {
				n := 1 + rng.IntN(1+try*try)
				cs = append(cs, bytes.Join(lines[i:min(i+n, len(lines))], nil))
				i += n
			}
			if try == 0 {
				cs = chunks
			}
			got, gotErr := splitChunks(cs)
			if fmt.Sprint(gotErr) != fmt.Sprint(wantErr) || len(got) != len(want) {
				t.Fatalf("stream %d, try %d: %d documents, %v; want %d, %v", si, try, len(got), gotErr, len(want), wantErr)
			}
			for i := range got {
				if !bytes.Equal(got[i].raw, want[i].raw) || got[i].line != want[i].line {
					t.Fatalf("stream %d, try %d: document %d differs (line %d, want %d)", si, try, i, got[i].line, want[i].line)
				}
			}
		}
	}
}
