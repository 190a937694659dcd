package main

import (
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"os"

	"go.uber.org/zap"

	"portico.dev/portico/internal/admin"
	"portico.dev/portico/internal/configstream"
	"portico.dev/portico/internal/controlplane/pipeline"
	"portico.dev/portico/internal/controlplane/provision"
	"portico.dev/portico/kube"
	"portico.dev/portico/proxy"
)

// gatewayFlags are the flags of a provisioned data plane (GEP-1762):
// serve one Gateway with the configuration its controller pushes.
type gatewayFlags struct {
	gateway    string
	controller string
	token      string
	caFile     string
}

func newGatewayFlags(fs *flag.FlagSet) *gatewayFlags {
	g := &gatewayFlags{}
	fs.StringVar(&g.gateway, "gateway", "", "namespace/name: run as the data plane of this one Gateway, configured by the controller at --controller-address (how Portico's provisioned Deployments run)")
	fs.StringVar(&g.controller, "controller-address", "", "with --gateway: host:port of the controller that pushes the configuration")
	fs.StringVar(&g.token, "controller-token", provision.TokenPath+"/token", "with --gateway: file of the ServiceAccount token presented to the controller")
	fs.StringVar(&g.caFile, "controller-ca", "", "with --gateway: PEM file of the certificate the controller serves with (default: $"+provision.ControllerCAEnv+")")
	return g
}

func (g *gatewayFlags) enabled() bool { return g.gateway != "" }

// check refuses flags that make no sense together.
func (g *gatewayFlags) check(f *serveFlags, fs *flag.FlagSet) error {
	if !g.enabled() {
		return nil
	}
	switch {
	case f.standalone():
		return errors.New("--gateway runs a data plane configured by its controller, not with --config")
	case f.cluster.set(fs):
		return errors.New("--gateway needs no cluster flags: its controller sends the configuration")
	case g.controller == "":
		return errors.New("--gateway needs --controller-address")
	}
	_, err := kube.ParseNamespacedName(g.gateway)
	return err
}

func (g *gatewayFlags) roots() (*x509.CertPool, error) {
	pemData := []byte(os.Getenv(provision.ControllerCAEnv))
	if g.caFile != "" {
		var err error
		if pemData, err = os.ReadFile(g.caFile); err != nil {
			return nil, fmt.Errorf("--controller-ca: %w", err)
		}
	}
	if len(pemData) == 0 {
		return nil, errors.New("no controller certificate: set --controller-ca or $" + provision.ControllerCAEnv)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pemData) {
		return nil, errors.New("the controller certificate is not PEM")
	}
	return pool, nil
}

// newGatewayMode is the loop of a data plane: the controller's stream as
// its source, translation for its one Gateway, acknowledgements of what
// was applied, ACME challenges answered by asking the controller. It
// writes no status and orders no certificate (its controller does both).
func (f *serveFlags) newGatewayMode(popts pipeline.Options, rt *proxy.Runtime, metrics *admin.Metrics, challenges *lateChallenges, log *zap.Logger) (*mode, error) {
	key, err := kube.ParseNamespacedName(f.gateway.gateway)
	if err != nil {
		return nil, err
	}
	roots, err := f.gateway.roots()
	if err != nil {
		return nil, err
	}
	src := &configstream.Source{Gateway: key, Controller: f.gateway.controller, TokenFile: f.gateway.token,
		RootCAs: roots, Pod: os.Getenv("POD_NAME"), Log: log.Named("stream")}
	if *f.sessionKey == "" {
		// The key the Gateway's replicas share comes with the stream,
		// before its first snapshot.
		src.OnSessionKey = rt.SetSessionKey
	}
	challenges.set(src)
	popts.Translate.Gateway = &key
	popts.Translate.Shared = nil
	out := pipeline.Outputs{Applied: func(r pipeline.ApplyReport) {
		metrics.ConfigApplied(r.Generation, r.Translate, r.Apply, r.Certificates, r.Err)
		metrics.ObserveChangeApplied(r.SinceChange)
		metrics.SetCertificatesExpiry(r.CertificatesExpire)
		src.Acknowledge(r.Err)
	}}
	log.Info("data plane mode", zap.Stringer("gateway", key), zap.String("controller", f.gateway.controller))
	return &mode{loop: pipeline.New(popts, src, rt, nil, out, log.Named("dataplane"))}, nil
}
