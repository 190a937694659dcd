package h1

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"runtime"
	"strings"
	"testing"
)

// readOne reads one answer from data with a, body and trailers included.
func readOne(t testing.TB, a *Answer, data string, limit int) {
	t.Helper()
	br := bufio.NewReaderSize(strings.NewReader(data), 4096)
	if err := a.ReadHead(br, http.MethodGet, limit); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadAll(a); err != nil {
		t.Fatal(err)
	}
}

// heldBy returns how many heap bytes a holds: the live heap with a, less
// the live heap once a is dropped.
func heldBy(a **Answer) uint64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m)
	with := m.HeapAlloc
	*a = nil
	runtime.GC()
	runtime.ReadMemStats(&m)
	if m.HeapAlloc > with {
		return 0
	}
	return with - m.HeapAlloc
}

// TestAnswerForgetsAHugeAnswer: an Answer lives as long as its pooled
// connection, its maps reused for every answer and released (Release) when
// the connection goes idle. A backend that sends one
// answer with many distinct field names, in its head or its trailer
// section (both bounded by bytes only, 10 MiB on the direct path), must
// not leave the connection holding that answer while it waits in the
// pool, nor maps of that size once a small answer followed: clear keeps a
// map's buckets, and every later answer would pay for clearing them too
// (BenchmarkAnswerAfterHugeAnswer).
func TestAnswerForgetsAHugeAnswer(t *testing.T) {
	const fields = 100_000
	var names strings.Builder
	for i := range fields {
		fmt.Fprintf(&names, "X-%d: v\r\n", i)
	}
	var tn strings.Builder
	for i := 0; tn.Len() < maxAnswerTrailer-64; i++ {
		fmt.Fprintf(&tn, "X-%d: v\r\n", i)
	}
	trailerNames := tn.String()
	const small = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
	const limit = 10 << 20
	for _, tc := range []struct{ name, huge string }{
		{"head", "HTTP/1.1 200 OK\r\n" + names.String() + "Content-Length: 0\r\n\r\n"},
		// A trailer section is bounded by maxAnswerTrailer: as many names
		// as fit (TestDirectTrailerSectionBound has one past it).
		{"trailers", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n" + trailerNames + "\r\n"},
		{"announced trailers", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: " +
			strings.ReplaceAll(strings.ReplaceAll(names.String(), ": v\r\n", ", "), "X-", "Y-") + "X\r\n\r\n0\r\n\r\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// What a fresh Answer holds after the small answer alone.
			b := new(Answer)
			readOne(t, b, small, limit)
			base := heldBy(&b)
			// The huge answer alone: the Answer as it waits in the pool,
			// released when its connection was put there.
			a := new(Answer)
			readOne(t, a, tc.huge, limit)
			a.Release()
			if held := heldBy(&a); held > base+(1<<20) {
				t.Errorf("idle after one answer with %d field names, the Answer holds %d KiB (one after a small answer %d KiB)",
					fields, held>>10, base>>10)
			}
			a = new(Answer)
			readOne(t, a, tc.huge, limit)
			readOne(t, a, small, limit)
			if held := heldBy(&a); held > base+(1<<20) {
				t.Errorf("after one answer with %d field names and a small one, the Answer holds %d KiB (a fresh one %d KiB)",
					fields, held>>10, base>>10)
			}
		})
	}
}

// FuzzAnswerThenClean reads an input as one answer, to GET or HEAD, with
// Answer and with http.ReadResponse (compareWithNetHTTP: no panic, the
// same reading or an intended difference); an answer with bytes after its
// end must not be Reusable; and the same Answer then reads a clean answer,
// as a pooled connection's does its next one: nothing of the input may be
// left in what it reads.
func FuzzAnswerThenClean(f *testing.F) {
	for _, s := range []string{
		"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-T\r\n\r\n2\r\nok\r\n0\r\nX-T: 1\r\n\r\n",
		"HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n",
		"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 1\r\n\r\nx",
		"HTTP/1.1 204 No Content\r\nContent-Length: 3\r\n\r\nabc",
		"HTTP/1.1 200 OK\nContent-Length: 2, 2\n\nok",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2 ;a=b\r\nok\r\n0\r\n\r\n",
		"HTTP/1.1 200\r\n\r\nuntil close",
	} {
		f.Add([]byte(s), false)
		f.Add([]byte(s), true)
	}
	const clean = "HTTP/1.1 200 OK\r\nX-Clean: 1\r\nContent-Length: 5\r\n\r\nclean"
	var fresh Answer
	cleanWant := readWithAnswer(&fresh, []byte(clean), http.MethodGet)
	f.Fuzz(func(t *testing.T, data []byte, head bool) {
		method := http.MethodGet
		if head {
			method = http.MethodHead
		}
		var a Answer
		compareWithNetHTTP(t, &a, data, method)
		// All of data is buffered at the first read when it fits the
		// reader: Reusable must then see what is left after the answer.
		br := bufio.NewReaderSize(bytes.NewReader(data), 4096)
		if len(data) <= 4096 && a.ReadHead(br, method, testLimit) == nil {
			if _, err := io.ReadAll(&a); err == nil && a.Reusable(br) && br.Buffered() > 0 {
				t.Errorf("%s %q: reusable with %d bytes after the answer", method, data, br.Buffered())
			}
		}
		got := readWithAnswer(&a, []byte(clean), http.MethodGet)
		if got.err != nil || got.status != cleanWant.status || got.body != cleanWant.body ||
			got.contentLength != cleanWant.contentLength || got.close != cleanWant.close ||
			!reflect.DeepEqual(got.header, cleanWant.header) || len(got.trailer) != 0 {
			t.Errorf("after %q, a clean answer read as %+v", data, got)
		}
	})
}

// BenchmarkAnswerAfterHugeAnswer reads a small answer with an Answer that
// read nothing else (fresh) or one answer with 100,000 field names before
// (after-huge): what one such answer costs every later answer on its
// connection.
func BenchmarkAnswerAfterHugeAnswer(b *testing.B) {
	var names strings.Builder
	for i := range 100_000 {
		fmt.Fprintf(&names, "X-%d: v\r\n", i)
	}
	huge := "HTTP/1.1 200 OK\r\n" + names.String() + "Content-Length: 0\r\n\r\n"
	const small = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nok"
	for _, name := range []string{"fresh", "after-huge"} {
		b.Run(name, func(b *testing.B) {
			var a Answer
			if name == "after-huge" {
				readOne(b, &a, huge, 10<<20)
			}
			sr := strings.NewReader(small)
			br := bufio.NewReaderSize(sr, 4096)
			buf := make([]byte, 64)
			for b.Loop() {
				sr.Reset(small)
				br.Reset(sr)
				if err := a.ReadHead(br, http.MethodGet, 10<<20); err != nil {
					b.Fatal(err)
				}
				for {
					if _, err := a.Read(buf); err != nil {
						break
					}
				}
			}
		})
	}
}
