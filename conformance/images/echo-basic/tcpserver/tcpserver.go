// Package tcpserver holds the answers of the conformance suite's TCP backend:
// a greeting line on connect, then, for a "TEST" line, one JSON line of
// TCPAssertions saying what the backend saw of the connection.
package tcpserver

// WelcomeMessage is the first line the backend writes on every connection.
const WelcomeMessage = "Gateway API Test TCP Server\n"

// Context names the backend pod that answered.
type Context struct {
	Namespace string `json:"namespace"`
	Ingress   string `json:"ingress"`
	Service   string `json:"service"`
	Pod       string `json:"pod"`
	TCPPort   string `json:"tcpport"`
	TLSPort   string `json:"tlsport,omitempty,omitzero"`
}

// TLSAssertions describe the TLS session the backend terminated.
type TLSAssertions struct {
	Version            string `json:"version"`
	ServerName         string `json:"serverName"`
	NegotiatedProtocol string `json:"negotiatedProtocol,omitempty,omitzero"`
	Curves             string `json:"curves,omitempty,omitzero"`
	CipherSuite        string `json:"cipherSuite"`
}

// TCPAssertions is the JSON answer to "TEST": the pod, whether the
// connection reached the backend over TLS, and that session when it did.
type TCPAssertions struct {
	Context      `json:",inline"`
	IsTLS        bool           `json:"isTLS"`
	TLSAssertion *TLSAssertions `json:"tls,omitempty,omitzero"`
}
