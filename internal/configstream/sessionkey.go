package configstream

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"

	"k8s.io/apimachinery/pkg/types"
)

// SessionKeyHeader carries, on a stream's answer, the key (64 hex digits)
// with which the Gateway's data plane seals session persistence values
// (proxy.Options.SessionKey). Every replica of one Gateway's data plane
// gets the same key from whichever controller replica it dials, so a
// session holds across its replicas and restarts.
const SessionKeyHeader = "Portico-Session-Key"

// SessionKeyLen is the length of a session key.
const SessionKeyLen = 32

// DeriveSessionKey is the session key of the Gateway gw's data plane:
// a MAC of its name under master, the key the controller replicas share
// (their session key Secret). It differs between Gateways, so a data
// plane learns nothing of another's key nor of master.
func DeriveSessionKey(master []byte, gw types.NamespacedName) []byte {
	m := hmac.New(sha256.New, master)
	m.Write([]byte("portico per-Gateway session key\x00"))
	m.Write([]byte(gw.Namespace + "/" + gw.Name))
	return m.Sum(nil)
}

// sessionKeyOf reads the session key of a stream's answer: nil when the
// controller sent none (it has no shared key: the data plane keeps its
// own).
func sessionKeyOf(h http.Header) ([]byte, error) {
	v := h.Get(SessionKeyHeader)
	if v == "" {
		return nil, nil
	}
	key, err := hex.DecodeString(v)
	if err != nil || len(key) != SessionKeyLen {
		return nil, fmt.Errorf("header %s: want %d hex digits", SessionKeyHeader, 2*SessionKeyLen)
	}
	return key, nil
}
