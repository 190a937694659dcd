// Package udpechoserver holds the answer of the conformance suite's UDP
// backend: one JSON datagram per datagram received.
package udpechoserver

// Context names the backend pod that answered.
type Context struct {
	Namespace string `json:"namespace"`
	Ingress   string `json:"ingress"`
	Service   string `json:"service"`
	Pod       string `json:"pod"`
}

// EchoResponse carries the datagram received, verbatim, and the pod.
type EchoResponse struct {
	Request string `json:"request"`
	Context `json:",inline"`
}
