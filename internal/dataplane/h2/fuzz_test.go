package h2

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// FuzzServeConn feeds arbitrary bytes after the preface: whatever they
// are, the server must not crash, and the connection must end once the
// client's side has.
func FuzzServeConn(f *testing.F) {
	var buf bytes.Buffer
	fr := http2.NewFramer(&buf, nil)
	fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1 << 20})
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for _, kv := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":authority", "a"}, {":path", "/x"}, {"content-length", "3"}, {"trailer", "x-t"}} {
		enc.WriteField(hpack.HeaderField{Name: kv[0], Value: kv[1]})
	}
	fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes(), EndHeaders: true})
	fr.WriteData(1, false, []byte("abc"))
	hb.Reset()
	enc.WriteField(hpack.HeaderField{Name: "x-t", Value: "v"})
	fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes(), EndHeaders: true, EndStream: true})
	fr.WriteWindowUpdate(0, 100)
	fr.WritePing(false, [8]byte{})
	fr.WriteRSTStream(1, http2.ErrCodeCancel)
	f.Add(buf.Bytes())
	f.Add([]byte{0, 0, 0, 4, 0, 0, 0, 0, 0, 0, 0, 5, 1, 5, 0, 0, 0, 3, 0x82, 0x86, 0x84})
	srv := &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.Header().Set("Trailer", "X-T")
		w.Write(b)
		w.Header().Set("X-T", r.Trailer.Get("X-T"))
	})}
	f.Fuzz(func(t *testing.T, data []byte) {
		client, server := net.Pipe()
		done := make(chan struct{})
		go func() {
			defer close(done)
			srv.ServeConn(context.Background(), server)
		}()
		go io.Copy(io.Discard, client)
		client.SetWriteDeadline(time.Now().Add(2 * time.Second))
		client.Write([]byte(http2.ClientPreface))
		client.Write(data)
		client.Close()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("the connection outlived its client")
		}
	})
}
