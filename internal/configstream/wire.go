// Package configstream carries configuration from Portico's controller to the
// data planes it provisions for Gateways of per-Gateway classes (GEP-1762).
//
// The controller (Hub) keeps, per Gateway, the Gateway-scoped snapshot
// (translate.Scope) and pushes it over a long-lived HTTPS stream to each
// data plane that asks for it; a data plane (Source) translates it itself
// with Settings.Gateway set, applies it, and acknowledges the version it
// applied and any port it could not bind. A data plane authenticates with a
// projected ServiceAccount token bound to the audience
// provision.TokenAudience; the controller has it reviewed (TokenReview)
// and sends a Gateway's snapshot only to the ServiceAccount provisioned for
// that Gateway. Data planes need no API access of their own, and N
// Gateways add no watch to the API server.
package configstream

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"

	"portico.dev/portico/internal/controlplane/snapshot"
)

// Paths the Hub serves.
const (
	// StreamPath: GET ?gateway=namespace/name, a stream of Update lines.
	StreamPath = "/v1/stream"
	// AckPath: POST an Ack.
	AckPath = "/v1/ack"
)

// Update is one line of the stream: a new snapshot, or a heartbeat (no
// version) that tells the data plane the controller is still there.
type Update struct {
	Version   string              `json:"version,omitempty"`
	Resources *snapshot.Resources `json:"resources,omitempty"`
}

// Ack is what a data plane reports after applying a snapshot.
type Ack struct {
	Gateway string `json:"gateway"`
	Pod     string `json:"pod,omitempty"`
	Version string `json:"version"`
	// Error says what could not be applied (ports that could not be
	// bound); empty when everything was.
	Error string `json:"error,omitempty"`
}

// encode is the stream line of a snapshot and its version: a hash of the
// line, so that equal snapshots have equal versions on every controller
// replica.
func encode(res *snapshot.Resources) ([]byte, string, error) {
	body, err := json.Marshal(res)
	if err != nil {
		return nil, "", fmt.Errorf("encode snapshot: %w", err)
	}
	sum := sha256.Sum256(body)
	version := hex.EncodeToString(sum[:12])
	line, err := json.Marshal(struct {
		Version   string          `json:"version"`
		Resources json.RawMessage `json:"resources"`
	}{version, body})
	if err != nil {
		return nil, "", fmt.Errorf("encode update: %w", err)
	}
	return append(line, '\n'), version, nil
}
