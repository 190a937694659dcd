package kubetest

import (
	"context"
	"testing"
)

// BenchmarkStartEnv measures a warm start: binaries already built, etcd and
// kube-apiserver started and ready, then (or not) the Gateway API CRDs
// installed and Established; Stop is included.
func BenchmarkStartEnv(b *testing.B) {
	root, err := RepoRoot()
	if err != nil {
		b.Fatal(err)
	}
	binDir, err := Binaries(context.Background(), root)
	if err != nil {
		b.Fatal(err)
	}
	crdDir, err := gatewayAPICRDDir(context.Background(), root, "")
	if err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct {
		name string
		opts Options
	}{
		{"gateway-crds", Options{BinDir: binDir, CRDDir: crdDir}},
		{"no-crds", Options{BinDir: binDir, NoCRDs: true}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				env, err := StartEnv(context.Background(), bc.opts)
				if err != nil {
					b.Fatal(err)
				}
				if err := env.Stop(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
