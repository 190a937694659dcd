// Package bench holds Portico's benchmarks of translate, propagation, SNI
// and the data plane, run with go test -bench; bench/README.md has their
// figures and how to read them.
package bench
