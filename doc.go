// Package portico is the root of Portico's module, a Kubernetes Gateway API
// implementation and L7 reverse proxy in one binary (cmd/portico). It holds
// no code: README.md's layout table lists every package with the first
// sentence of its documentation, and TestLayoutTable keeps the two in step.
package portico
