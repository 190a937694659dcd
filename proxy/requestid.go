package proxy

import (
	"encoding/binary"
	"encoding/hex"
	"math/rand/v2"
	"net/http"
)

// requestIDHeader carries a request's ID to the backend (Options.RequestID).
const requestIDHeader = "X-Request-Id"

// setRequestID makes sure r carries an ID and returns it. A client's own ID
// is kept when it is a short token of visible ASCII, so that a request can
// be followed from the client through Portico to the backend; anything
// else is replaced by 32 random hex digits, which only need to be unique,
// not secret.
func setRequestID(r *http.Request) string {
	if vs := r.Header[requestIDHeader]; len(vs) == 1 && validRequestID(vs[0]) {
		return vs[0]
	}
	var b [16]byte
	binary.LittleEndian.PutUint64(b[:8], rand.Uint64())
	binary.LittleEndian.PutUint64(b[8:], rand.Uint64())
	id := hex.EncodeToString(b[:])
	r.Header[requestIDHeader] = []string{id}
	return id
}

func validRequestID(s string) bool {
	if len(s) == 0 || len(s) > 128 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] > 0x7e {
			return false
		}
	}
	return true
}
