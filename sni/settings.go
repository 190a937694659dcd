package sni

import "crypto/tls"

// Settings are a listener's own handshake settings; a zero field keeps
// the port's.
type Settings struct {
	// MinVersion and MaxVersion are tls.VersionTLS12 or tls.VersionTLS13.
	MinVersion, MaxVersion uint16
	// CipherSuites are the TLS 1.2 suites offered, in order (TLS 1.3's
	// are not configurable in crypto/tls).
	CipherSuites []uint16
	// NextProtos are the ALPN protocols, "h2" and "http/1.1".
	NextProtos []string
	// SessionTicketsDisabled turns resumption by tickets off.
	SessionTicketsDisabled bool
}

// apply sets s on cfg; a nil s sets nothing.
func (s *Settings) apply(cfg *tls.Config) {
	if s == nil {
		return
	}
	if s.MinVersion != 0 {
		cfg.MinVersion = s.MinVersion
	}
	if s.MaxVersion != 0 {
		cfg.MaxVersion = s.MaxVersion
	}
	if len(s.CipherSuites) > 0 {
		cfg.CipherSuites = s.CipherSuites
	}
	if len(s.NextProtos) > 0 {
		cfg.NextProtos = s.NextProtos
	}
	if s.SessionTicketsDisabled {
		cfg.SessionTicketsDisabled = true
	}
}
