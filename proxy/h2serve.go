package proxy

import (
	"net/http"

	"portico.dev/portico/internal/dataplane/h2"
)

// h2HeaderSlack is added to MaxHeaderBytes for the HTTP/2 header list
// bound, which counts 32 bytes more per field than the fields' text (RFC
// 9113, 6.5.2): a request under the HTTP/1 bound passes under HTTP/2 too.
const h2HeaderSlack = 4096

// newH2Server is the port's HTTP/2 server.
func (ps *portServer) newH2Server() *h2.Server {
	o := &ps.rt.opts
	return &h2.Server{
		Handler:                      http.HandlerFunc(ps.serveLimited),
		Log:                          ps.log,
		MaxConcurrentStreams:         o.MaxConcurrentStreams,
		MaxReadFrameSize:             o.MaxReadFrameSize,
		MaxUploadBufferPerConnection: o.MaxUploadBufferConn,
		MaxUploadBufferPerStream:     o.MaxUploadBufferStrm,
		MaxHeaderBytes:               o.MaxHeaderBytes + h2HeaderSlack,
		IdleTimeout:                  o.IdleTimeout,
		// A client that stops reading the connection altogether.
		WriteByteTimeout: max(o.ClientIdleTimeout, 0),
		PrefaceTimeout:   o.ReadHeaderTimeout,
	}
}
