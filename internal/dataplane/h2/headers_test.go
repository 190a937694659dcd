package h2

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// TestRequestHeaderValues checks the header map whose values share one
// array: repeated names keep their order, and a handler that appends to
// or overwrites one field's values changes no other field.
func TestRequestHeaderValues(t *testing.T) {
	c := &conn{canon: map[string]string{}}
	h, err := c.requestHeader([]hpackField{{Name: "a", Value: "1"}, {Name: "b", Value: "2"}, {Name: "a", Value: "3"},
		{Name: "cookie", Value: "x=1"}, {Name: "c", Value: "4"}, {Name: "cookie", Value: "y=2"}})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{"A": {"1", "3"}, "B": {"2"}, "C": {"4"}, "Cookie": {"x=1; y=2"}}
	if !reflect.DeepEqual(map[string][]string(h), want) {
		t.Fatalf("header %v, want %v", h, want)
	}
	h["B"] = append(h["B"], "5")
	h.Add("C", "6")
	h["A"][0] = "7"
	want = map[string][]string{"A": {"7", "3"}, "B": {"2", "5"}, "C": {"4", "6"}, "Cookie": {"x=1; y=2"}}
	if !reflect.DeepEqual(map[string][]string(h), want) {
		t.Fatalf("header after the handler's changes %v, want %v", h, want)
	}
}

// TestHeaderBlockNoCarryOver sends, on one connection, header blocks that
// leave the reused decoding state in each of its ends (truncated past
// the bound, an invalid field, a duplicated pseudo-header field, many
// fields, a pseudo-header field after a regular one), each followed by a
// plain request: that one gets its own fields and nothing of the block
// before it.
func TestHeaderBlockNoCarryOver(t *testing.T) {
	var mu sync.Mutex
	seen := map[string]http.Header{}
	ts := startServer(t, &Server{MaxHeaderBytes: 2048, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen[r.URL.Path] = r.Header.Clone()
		mu.Unlock()
	})}, false)
	rc := dialHostile(t, ts.addr, true)
	var many, big []string
	for i := range 40 {
		many = append(many, fmt.Sprintf("x-many-%d", i), "v")
		big = append(big, fmt.Sprintf("x-big-%d", i), strings.Repeat("b", 100))
	}
	bad := []struct {
		name   string
		fields []string
		status string // "" for a reset
	}{
		{"truncated", big, "431"},
		{"invalid name", []string{"x-ok", "1", "X-Upper", "1"}, ""},
		{"invalid value", []string{"x-ok", "1", "x-bad", "a\x00b"}, ""},
		{"pseudo twice", []string{":path", "/again"}, ""},
		{"pseudo after regular", []string{"x-ok", "1", ":protocol", "websocket"}, ""},
		{"many fields", many, "200"},
	}
	id := uint32(1)
	for i, b := range bad {
		rc.get(id, "/bad", true, b.fields...)
		f, ok := rc.wait(5*time.Second, func(f seenFrame) bool {
			return f.stream == id && (f.typ == http2.FrameRSTStream || f.typ == http2.FrameHeaders)
		})
		switch {
		case !ok:
			t.Fatalf("%s: no answer", b.name)
		case b.status == "" && (f.typ != http2.FrameRSTStream || f.code != http2.ErrCodeProtocol):
			t.Fatalf("%s: %v, want RST_STREAM PROTOCOL_ERROR", b.name, f)
		case b.status != "" && (f.typ != http2.FrameHeaders || f.fields[0].Value != b.status):
			t.Fatalf("%s: %v %v, want status %s", b.name, f, f.fields, b.status)
		}
		id += 2
		path := "/plain" + strconv.Itoa(i)
		rc.get(id, path, true, "x-plain", strconv.Itoa(i))
		if _, ok := rc.wait(5*time.Second, func(f seenFrame) bool { return f.stream == id && f.typ == http2.FrameHeaders }); !ok {
			t.Fatalf("after %s: the plain request got no answer", b.name)
		}
		id += 2
		mu.Lock()
		got := seen[path]
		mu.Unlock()
		if want := (http.Header{"X-Plain": {strconv.Itoa(i)}}); !reflect.DeepEqual(got, want) {
			t.Fatalf("after %s: the next request's header is %v, want %v", b.name, got, want)
		}
	}
}

// TestStreamsShareNothing runs many streams at once on one connection,
// each with fields, a body and trailers of its own, some reset by the
// client and some whose handler panics: every handler sees its stream's
// fields, body and trailers only, and a context of its own.
func TestStreamsShareNothing(t *testing.T) {
	type ctxKey struct{}
	var wrong sync.Map
	mismatch := func(i int, what string, got, want any) {
		wrong.Store(fmt.Sprintf("stream %d: %s %v, want %v", i, what, got, want), true)
	}
	ts := startServer(t, &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		i, _ := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/"))
		if v := r.Context().Value(ctxKey{}); v != nil {
			mismatch(i, "context value", v, nil)
		}
		r = r.WithContext(context.WithValue(r.Context(), ctxKey{}, i))
		s := strconv.Itoa(i)
		var names []string
		for k := range r.Header {
			if strings.HasPrefix(k, "X-") {
				names = append(names, k)
			}
		}
		slices.Sort(names)
		if want := []string{"X-Id", "X-K" + strconv.Itoa(i%4)}; !slices.Equal(names, want) {
			mismatch(i, "fields", names, want)
		}
		if got := r.Header.Values("X-Id"); len(got) != 1 || got[0] != s {
			mismatch(i, "X-Id", got, s)
		}
		if i%7 == 3 {
			panic(http.ErrAbortHandler)
		}
		body, err := io.ReadAll(r.Body)
		if i%5 == 1 {
			// The client resets this one mid-body.
			return
		}
		if err != nil || string(body) != "body-"+s {
			mismatch(i, "body", string(body), "body-"+s)
		}
		if got := r.Trailer.Get("X-T"); i%2 == 1 && got != s || i%2 == 0 && len(r.Trailer) > 0 {
			mismatch(i, "trailer", r.Trailer, s)
		}
		w.Header().Set("X-Echo", s)
		io.WriteString(w, s)
	})}, false)
	cl := ts.client(t)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 32)
	for i := range 600 {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			s := strconv.Itoa(i)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var body io.Reader = strings.NewReader("body-" + s)
			if i%5 == 1 {
				pr, pw := io.Pipe()
				go func() {
					io.WriteString(pw, "body-")
					time.Sleep(time.Millisecond)
					cancel()
					pw.CloseWithError(context.Canceled)
				}()
				body = pr
			}
			req, _ := http.NewRequestWithContext(ctx, "POST", ts.url()+"/"+s, body)
			req.Header.Set("X-Id", s)
			req.Header.Set("X-K"+strconv.Itoa(i%4), s)
			if i%2 == 1 {
				req.Trailer = http.Header{"X-T": {s}}
			}
			res, err := cl.Do(req)
			if err != nil {
				if i%7 != 3 && i%5 != 1 {
					wrong.Store(fmt.Sprintf("stream %d: %v", i, err), true)
				}
				return
			}
			got, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if i%5 != 1 && (string(got) != s || res.Header.Get("X-Echo") != s) {
				mismatch(i, "answer", string(got)+" "+res.Header.Get("X-Echo"), s)
			}
		}()
	}
	wg.Wait()
	var all []string
	wrong.Range(func(k, _ any) bool { all = append(all, k.(string)); return true })
	slices.Sort(all)
	if len(all) > 0 {
		t.Fatalf("%d wrong:\n%s", len(all), strings.Join(all[:min(len(all), 20)], "\n"))
	}
}

// TestHeaderBlockAsFramer decodes random header blocks, split in random
// CONTINUATION frames, with the connection's headerBlock and with x/net's
// framer decoding (ReadMetaHeaders), which it replaces: both take the same
// fields, truncate at the same field, and fail the stream or the
// connection alike, block after block on a connection whose HPACK table
// they share.
func TestHeaderBlockAsFramer(t *testing.T) {
	const limit = 1024
	rng := rand.New(rand.NewPCG(3, 4))
	fields := [][2]string{{":method", "GET"}, {":path", "/x"}, {":scheme", "http"}, {":authority", "a"},
		{":status", "200"}, {":foo", "x"}, {":protocol", "websocket"}, {"x-a", "v"}, {"x-a", "w"}, {"X-Up", "v"},
		{"x-bad", "a\x00b"}, {"x-sp", " v "}, {"trailer", "a, b,c"}, {"trailer", strings.Repeat("t,", 60)},
		{"cookie", "k=v"}, {"bad name", "v"}, {"", "v"}, {"x-utf8", "é"}, {"x-long", ""}}
	classify := func(err error) string {
		var se http2.StreamError
		var ce http2.ConnectionError
		switch {
		case err == nil:
			return "ok"
		case errors.As(err, &se):
			return fmt.Sprintf("stream %d %v", se.StreamID, se.Code)
		case errors.As(err, &ce):
			return fmt.Sprintf("connection %v", http2.ErrCode(ce))
		}
		return "other " + err.Error()
	}
	blocks := 0
	kinds := map[string]int{}
	for conn := range 1000 {
		var wire bytes.Buffer
		wfr := http2.NewFramer(&wire, nil)
		wfr.AllowIllegalWrites = true
		var hbuf bytes.Buffer
		enc := hpack.NewEncoder(&hbuf)
		xfr := http2.NewFramer(nil, &wire)
		xfr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
		xfr.MaxHeaderListSize = limit
		var ours headerBlock
		ours.init(limit)
		for n := range 20 {
			hbuf.Reset()
			if rng.IntN(20) == 0 {
				enc.SetMaxDynamicTableSize(uint32(rng.IntN(4097)))
			}
			for range rng.IntN(12) {
				f := fields[rng.IntN(len(fields))]
				if f[0] == "x-long" {
					f[1] = strings.Repeat("l", rng.IntN(1100))
				}
				_ = enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1], Sensitive: rng.IntN(8) == 0})
			}
			block := bytes.Clone(hbuf.Bytes())
			if rng.IntN(30) == 0 && len(block) > 0 {
				block[rng.IntN(len(block))] ^= byte(1 + rng.IntN(255)) // a corrupt block
			}
			id := uint32(2*n + 1)
			frags := [][]byte{block}
			for rng.IntN(3) == 0 && len(frags[len(frags)-1]) > 1 {
				last := frags[len(frags)-1]
				i := 1 + rng.IntN(len(last)-1)
				frags = append(frags[:len(frags)-1], last[:i], last[i:])
			}
			wire.Reset()
			_ = wfr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: frags[0], EndHeaders: len(frags) == 1, EndStream: true})
			for i, frag := range frags[1:] {
				if rng.IntN(40) == 0 {
					_ = wfr.WritePing(false, [8]byte{}) // out of order
				}
				_ = wfr.WriteContinuation(id, i == len(frags)-2, frag)
			}
			raw := bytes.Clone(wire.Bytes())
			xf, xerr := xfr.ReadFrame()
			wire.Reset()
			wire.Write(raw)
			ofr := http2.NewFramer(nil, &wire)
			ofr.MaxHeaderListSize = limit
			var of *http2.MetaHeadersFrame
			f, oerr := ofr.ReadFrame()
			if oerr == nil {
				of, oerr = ours.read(ofr, f.(*http2.HeadersFrame))
			}
			blocks++
			kind, _, _ := strings.Cut(classify(xerr), " ")
			kinds[fmt.Sprintf("%s truncated=%v", kind, xerr == nil && xf.(*http2.MetaHeadersFrame).Truncated)]++
			if classify(oerr) != classify(xerr) {
				t.Fatalf("connection %d block %d: %s, the framer's %s", conn, n, classify(oerr), classify(xerr))
			}
			if xerr != nil {
				var se http2.StreamError
				if errors.As(xerr, &se) {
					continue
				}
				break // the connection ends: the tables may differ now
			}
			xm := xf.(*http2.MetaHeadersFrame)
			if of.Truncated != xm.Truncated || !slices.Equal(of.Fields, xm.Fields) {
				t.Fatalf("connection %d block %d: %v truncated %v, the framer's %v truncated %v", conn, n, of.Fields, of.Truncated, xm.Fields, xm.Truncated)
			}
		}
	}
	t.Logf("%d blocks: %v", blocks, kinds)
	if blocks < 4000 || len(kinds) < 4 {
		t.Fatalf("only %d blocks compared, of %d kinds", blocks, len(kinds))
	}
}
