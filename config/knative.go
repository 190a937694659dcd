package config

// Headers of Knative's readiness probing, which the data plane answers
// (Rule.NetworkHash) and the control plane's prober sends.
const (
	// KnativeHashHeader carries the hash of the Ingress version a gateway
	// serves.
	KnativeHashHeader = "K-Network-Hash"
	// KnativeHashOverride, as KnativeHashHeader's value, asks the gateway
	// to replace it with the hash of the version it serves.
	KnativeHashOverride = "override"
	// KnativeProbeHeader marks a probe request.
	KnativeProbeHeader = "K-Network-Probe"
	// KnativePorticoProbe, as KnativeProbeHeader's value with a
	// KnativeHashHeader of KnativeHashOverride, is the probe of Portico's
	// own leader: the replica answers it itself with the hash of the
	// version it serves, whatever the backend's state, since what the
	// probe asks is whether this replica serves that version.
	KnativePorticoProbe = "portico"
)
