package filesource

import (
	"fmt"
	"strings"
	"testing"
)

// A reload of a file with one document changed admits that document
// alone; the others keep their admitted objects, the same pointers, with
// the creation time and generation they had.
func TestReloadAdmitsOnlyChangedDocuments(t *testing.T) {
	const n = 50
	d := fileDir{t, t.TempDir()}
	routes := make([]string, n)
	for i := range routes {
		routes[i] = routeYAML(fmt.Sprintf("r%d", i), fmt.Sprintf("/p%d", i))
	}
	d.put("routes.yaml", strings.Join(routes, "---\n"))
	d.put("other.yaml", routeYAML("other", "/other"))
	s := watched(d.dir)
	before := routesByName(t, s)
	if got := s.Admissions(); got != n+1 {
		t.Fatalf("first load admitted %d objects, want %d", got, n+1)
	}

	routes[7] = routeYAML("r7", "/changed")
	d.put("routes.yaml", strings.Join(routes, "---\n"))
	s.saw("routes.yaml")
	after := routesByName(t, s)
	if got := s.Admissions(); got != n+2 {
		t.Fatalf("after one document changed, %d admissions in all, want %d (one more)", got, n+2)
	}
	for name, r := range after {
		switch {
		case name == "r7":
			if r == before[name] || pathOf(r) != "/changed" {
				t.Errorf("r7: the changed document kept its old object (path %q)", pathOf(r))
			}
			if r.Generation != 2 || !r.CreationTimestamp.Equal(&before[name].CreationTimestamp) {
				t.Errorf("r7: generation %d, created %v; want 2, %v", r.Generation, r.CreationTimestamp, before[name].CreationTimestamp)
			}
		case r != before[name]:
			t.Errorf("%s: an unchanged document was decoded again", name)
		}
	}

	// The same bytes at another position, and the file's documents
	// reordered: nothing is admitted again.
	routes[0], routes[1] = routes[1], routes[0]
	d.put("routes.yaml", strings.Join(routes, "---\n"))
	s.saw("routes.yaml")
	reordered := routesByName(t, s)
	if got := s.Admissions(); got != n+2 {
		t.Fatalf("reordering documents admitted %d objects again", got-(n+2))
	}
	for name, r := range reordered {
		if r != after[name] {
			t.Errorf("%s: a moved document was decoded again", name)
		}
	}

	// A document removed and put back is new again: it is decoded, and its
	// creation time is not the old one's.
	d.put("routes.yaml", strings.Join(routes[1:], "---\n"))
	s.saw("routes.yaml")
	routesByName(t, s)
	d.put("routes.yaml", strings.Join(routes, "---\n"))
	s.saw("routes.yaml")
	back := routesByName(t, s)
	if got := s.Admissions(); got != n+3 {
		t.Fatalf("a document put back: %d admissions in all, want %d", got, n+3)
	}
	if back["r1"] == after["r1"] || back["r1"].CreationTimestamp.Before(&after["r1"].CreationTimestamp) {
		t.Errorf("a document put back kept the object it had before it was removed")
	}
}

// A file of several chunks (readChunks) decodes as one: documents across
// chunks keep their objects on a reload, and a change of one of them is
// picked up.
func TestReloadOfAFileOfSeveralChunks(t *testing.T) {
	const n = 12
	d := fileDir{t, t.TempDir()}
	routes := make([]string, n)
	padding := "# " + strings.Repeat("x", chunkSize/3) + "\n"
	for i := range routes {
		routes[i] = padding + routeYAML(fmt.Sprintf("r%d", i), fmt.Sprintf("/p%d", i)) + padding
	}
	d.put("routes.yaml", strings.Join(routes, "---\n"))
	s := watched(d.dir)
	before := routesByName(t, s)
	for i := range n {
		if r := before[fmt.Sprintf("r%d", i)]; r == nil || pathOf(r) != fmt.Sprintf("/p%d", i) {
			t.Fatalf("r%d: not decoded from a file of several chunks", i)
		}
	}
	routes[5] = padding + routeYAML("r5", "/changed") + padding
	d.put("routes.yaml", strings.Join(routes, "---\n"))
	s.saw("routes.yaml")
	after := routesByName(t, s)
	if got := s.Admissions(); got != n+1 {
		t.Fatalf("after one document changed, %d admissions in all, want %d", got, n+1)
	}
	for name, r := range after {
		switch {
		case name == "r5":
			if pathOf(r) != "/changed" {
				t.Errorf("r5: path %q after its change", pathOf(r))
			}
		case r != before[name]:
			t.Errorf("%s: an unchanged document was decoded again", name)
		}
	}
}
