package configstream

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
	"k8s.io/apimachinery/pkg/types"
)

// TestSessionKeyOnStream: a data plane gets its Gateway's session key
// with its stream, before the first snapshot, and the same one on every
// stream (a replica or a restart); a key derived for another Gateway, or
// under another master, differs; a ServiceAccount that is not the
// Gateway's, or a forged token, gets no key at all.
func TestSessionKeyOnStream(t *testing.T) {
	master := bytes.Repeat([]byte{7}, SessionKeyLen)
	h := NewHub(testAuth, zaptest.NewLogger(t))
	h.SessionKey = master
	h.Publish([]Plane{{Gateway: web, ServiceAccount: "web-dedicated", Resources: objectsOfRoute("v1")}})
	srv, roots := hubServer(t, h, "127.0.0.1:0")
	addr := srv.Listener.Addr().String()

	want := DeriveSessionKey(master, web)
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("web-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, pod := range []string{"web-a", "web-b", "web-b-restarted"} {
		got := make(chan []byte, 4)
		s := &Source{Gateway: web, Controller: addr, TokenFile: tokenFile, RootCAs: roots, Pod: pod, Log: zaptest.NewLogger(t), Silence: time.Second,
			OnSessionKey: func(k []byte) error { got <- k; return nil }}
		ready := make(chan struct{})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- s.Run(ctx, func() {}, func() { close(ready) }) }()
		select {
		case k := <-got:
			if !bytes.Equal(k, want) {
				t.Fatalf("%s: key %x, want %x", pod, k, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: no session key", pod)
		}
		select {
		case <-ready:
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: no snapshot after the key", pod)
		}
		cancel()
		<-done
	}
	if bytes.Equal(DeriveSessionKey(master, types.NamespacedName{Namespace: "apps", Name: "other"}), want) {
		t.Error("two Gateways got one key")
	}
	if bytes.Equal(DeriveSessionKey(bytes.Repeat([]byte{8}, SessionKeyLen), web), want) {
		t.Error("two masters gave one key")
	}
	for _, token := range []string{"other-token", "forged"} {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+StreamPath+"?gateway=apps/web", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if v := resp.Header.Get(SessionKeyHeader); v != "" || resp.StatusCode == http.StatusOK {
			t.Errorf("token %q: %d with key %q", token, resp.StatusCode, v)
		}
	}
}
