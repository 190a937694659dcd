//go:build tools

// Package kubebin pins the versions of the Kubernetes control-plane programs
// that the tests of Portico run: hack/kube-binaries.sh builds them from this
// module, so their versions come from go.mod and go.sum alone.
package kubebin

import (
	_ "go.etcd.io/etcd/server/v3"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
)
