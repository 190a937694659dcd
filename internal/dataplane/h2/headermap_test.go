package h2

import (
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strconv"
	"sync"
	"testing"
)

// TestHeaderMapsReusedEmptyAndBounded: a response header map comes back
// empty, a map that grew past maxHeaderMapFields is not kept, and a
// connection keeps at most maxHeaderMaps.
func TestHeaderMapsReusedEmptyAndBounded(t *testing.T) {
	c := &conn{}
	h := c.headerMap()
	h.Set("X-A", "1")
	h.Set("X-B", "2")
	c.putHeaderMap(h)
	g := c.headerMap()
	if reflect.ValueOf(g).UnsafePointer() != reflect.ValueOf(h).UnsafePointer() {
		t.Fatal("a finished response's map was not reused")
	}
	if len(g) != 0 {
		t.Fatalf("reused map holds %v", g)
	}
	big := http.Header{}
	for i := range maxHeaderMapFields + 1 {
		big.Set("X-"+strconv.Itoa(i), "v")
	}
	c.putHeaderMap(big)
	if len(c.hmaps) != 0 {
		t.Fatal("a map grown past the bound was kept")
	}
	for range 2 * maxHeaderMaps {
		c.putHeaderMap(http.Header{"X": {"v"}})
	}
	if len(c.hmaps) != maxHeaderMaps {
		t.Fatalf("%d maps kept, want %d", len(c.hmaps), maxHeaderMaps)
	}
}

// TestResponseHeadersNotCarriedOver: 64 clients' streams over one
// connection, each response with fields of its own (some many, so that
// their maps are dropped, most few): every handler finds an empty header
// map and every client gets exactly its own fields.
func TestResponseHeadersNotCarriedOver(t *testing.T) {
	srv := &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		if len(h) != 0 {
			t.Errorf("%s: handler found %v in its header", r.URL.Path, h)
		}
		id := r.URL.Query().Get("id")
		n, _ := strconv.Atoi(r.URL.Query().Get("n"))
		for i := range n {
			h.Set(fmt.Sprintf("X-%d", i), id)
		}
		h.Set("X-Id", id)
		io.WriteString(w, id)
	})}
	ts := startServer(t, srv, false)
	cl := ts.client(t)
	var wg sync.WaitGroup
	for g := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 20 {
				id := fmt.Sprintf("%d-%d", g, i)
				n := 1 + (g*7+i)%5
				if i%7 == 3 {
					n = maxHeaderMapFields + 5
				}
				res, err := cl.Get(fmt.Sprintf("%s/?id=%s&n=%d", ts.url(), id, n))
				if err != nil {
					t.Error(err)
					return
				}
				b, _ := io.ReadAll(res.Body)
				res.Body.Close()
				if string(b) != id || res.Header.Get("X-Id") != id {
					t.Errorf("%s: got body %q, X-Id %q", id, b, res.Header.Get("X-Id"))
				}
				for k, vv := range res.Header {
					if k == "Content-Type" || k == "Content-Length" || k == "Date" {
						continue
					}
					if len(vv) != 1 || vv[0] != id {
						t.Errorf("%s: field %s: %q", id, k, vv)
					}
				}
				if x := res.Header.Get(fmt.Sprintf("X-%d", n)); x != "" {
					t.Errorf("%s: field X-%d of another response: %q", id, n, x)
				}
			}
		}()
	}
	wg.Wait()
}
