package main

import (
	"flag"
	"fmt"

	corev1 "k8s.io/api/core/v1"

	"portico.dev/portico/internal/controlplane/provision"
)

// dataPlaneOptions are the flags of provisioning (GEP-1762): what the
// Deployments of Gateways with data planes of their own run.
type dataPlaneOptions struct {
	image      string
	pullPolicy string
	controller string
	listen     string
	tlsSecret  string
}

func dataPlaneFlags(fs *flag.FlagSet) *dataPlaneOptions {
	o := &dataPlaneOptions{}
	fs.StringVar(&o.image, "data-plane-image", "portico:latest", "image of the data planes Portico provisions for Gateways of per-Gateway classes (Portico's own)")
	fs.StringVar(&o.pullPolicy, "data-plane-image-pull-policy", string(corev1.PullIfNotPresent), "imagePullPolicy of the data planes' container: Always, IfNotPresent or Never")
	fs.StringVar(&o.controller, "data-plane-controller-address", "portico-controller.portico-system.svc:9443", "host:port where provisioned data planes reach Portico's controller for their configuration")
	fs.StringVar(&o.listen, "data-plane-listen", "", "address where this replica serves provisioned data planes their configuration, over TLS (default: none; deploy/ sets :9443)")
	fs.StringVar(&o.tlsSecret, "data-plane-tls-secret", "portico-data-plane-tls", "Secret of Portico's namespace holding the certificate served to data planes; created when missing")
	return o
}

func (o *dataPlaneOptions) settings() (*provision.Settings, error) {
	switch p := corev1.PullPolicy(o.pullPolicy); p {
	case corev1.PullAlways, corev1.PullIfNotPresent, corev1.PullNever:
		return &provision.Settings{Image: o.image, ImagePullPolicy: p, Controller: o.controller}, nil
	}
	return nil, fmt.Errorf("--data-plane-image-pull-policy %q: not Always, IfNotPresent or Never", o.pullPolicy)
}
