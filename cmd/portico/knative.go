package main

import (
	"flag"
	"fmt"
	"slices"
	"strings"

	"k8s.io/client-go/dynamic"

	"portico.dev/portico/internal/controlplane/knative"
	"portico.dev/portico/kube"
	"portico.dev/portico/kube/kingress"
	"portico.dev/portico/translate"
)

// knativeOptions are the flags of Knative mode: Portico serves Knative
// Serving's KIngresses of its class besides the Gateway API.
type knativeOptions struct {
	enabled                       bool
	class, certificateClass       string
	externalService, localService string
	clusterDomain                 string
	externalHTTP, externalHTTPS   int
	localHTTP, localHTTPS         int
}

func knativeFlags(fs *flag.FlagSet) *knativeOptions {
	o := &knativeOptions{}
	fs.BoolVar(&o.enabled, "knative", false, "serve Knative Serving's KIngresses (networking.internal.knative.dev) of --knative-ingress-class (cluster mode)")
	fs.StringVar(&o.class, "knative-ingress-class", knative.DefaultIngressClass, "networking.knative.dev/ingress.class of the KIngresses Portico serves (config-network's ingress-class)")
	fs.StringVar(&o.certificateClass, "knative-certificate-class", knative.DefaultCertificateClass, "networking.knative.dev/certificate.class of the Certificates Portico issues over ACME HTTP-01 (config-network's certificate-class)")
	fs.StringVar(&o.externalService, "knative-external-service", "portico-system/portico-external", "namespace/name of the external gateway's Service (its name is the KIngresses' public domainInternal)")
	fs.StringVar(&o.localService, "knative-local-service", "portico-system/portico-internal", "namespace/name of the cluster-local gateway's Service: its ready endpoints are the replicas probed, its name the private domainInternal, and ExternalName Services naming it are served in process")
	fs.StringVar(&o.clusterDomain, "knative-cluster-domain", "cluster.local", "the cluster's DNS domain")
	fs.IntVar(&o.externalHTTP, "knative-external-http-port", 8080, "port of the external gateway's plain HTTP")
	fs.IntVar(&o.externalHTTPS, "knative-external-https-port", 8443, "port of the external gateway's HTTPS")
	fs.IntVar(&o.localHTTP, "knative-local-http-port", 8081, "port of the cluster-local gateway's plain HTTP")
	fs.IntVar(&o.localHTTPS, "knative-local-https-port", 8444, "port of the cluster-local gateway's HTTPS (bound when a cluster-local host has a certificate)")
	return o
}

// set reports whether any flag of Knative mode was given.
func (o *knativeOptions) set(fs *flag.FlagSet) bool {
	found := false
	fs.Visit(func(f *flag.Flag) {
		if f.Name == "knative" || strings.HasPrefix(f.Name, "knative-") {
			found = true
		}
	})
	return found
}

// settings are translate's Knative settings, nil when the mode is off.
func (o *knativeOptions) settings() (*translate.KnativeSettings, error) {
	if !o.enabled {
		return nil, nil
	}
	local, err := kube.ParseNamespacedName(o.localService)
	if err != nil {
		return nil, fmt.Errorf("--knative-local-service: %w", err)
	}
	if _, err := kube.ParseNamespacedName(o.externalService); err != nil {
		return nil, fmt.Errorf("--knative-external-service: %w", err)
	}
	ports := []int{o.externalHTTP, o.externalHTTPS, o.localHTTP, o.localHTTPS}
	for _, p := range ports {
		if p < 1 || p > 65535 {
			return nil, fmt.Errorf("--knative-*-port: %d is out of range", p)
		}
	}
	sorted := slices.Clone(ports)
	slices.Sort(sorted)
	if len(slices.Compact(sorted)) != len(ports) {
		return nil, fmt.Errorf("--knative-*-port: the four ports must differ, got %v", ports)
	}
	return &translate.KnativeSettings{
		IngressClass:     o.class,
		CertificateClass: o.certificateClass,
		ExternalHTTPPort: int32(o.externalHTTP), ExternalHTTPSPort: int32(o.externalHTTPS),
		LocalHTTPPort: int32(o.localHTTP), LocalHTTPSPort: int32(o.localHTTPS),
		LocalService: local, ClusterDomain: o.clusterDomain,
	}, nil
}

// newKnative wraps the cluster source with the KIngress source and
// status writer.
func newKnative(c *kube.Cluster, co *clusterOptions, s *translate.KnativeSettings) (*kingress.Knative, error) {
	cfg, err := restConfig(co.kubeconfig)
	if err != nil {
		return nil, err
	}
	cfg.QPS, cfg.Burst, cfg.UserAgent = float32(co.qps), co.burst, "portico"
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("dynamic client: %w", err)
	}
	ext, _ := kube.ParseNamespacedName(co.knative.externalService) // checked by settings
	return &kingress.Knative{
		Cluster: kingress.Cluster{Run: c.Run, Snapshot: c.Snapshot, Leading: c.Leading},
		Log:     c.Log, OnStatusWrite: c.OnStatusWrite,
		Dynamic: dyn, Settings: *s, ExternalService: ext,
		Workers: co.statusWorkers,
	}, nil
}
