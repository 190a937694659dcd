package main

import (
	"io"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	"portico.dev/portico/internal/controlplane/knative"
)

// TestKnativeFlags checks the flags of Knative mode as they reach the run
// loop's options.
func TestKnativeFlags(t *testing.T) {
	f, err := parseServeFlags([]string{"--gateway-address=192.0.2.1"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	opts, err := f.pipelineOptions()
	if err != nil || opts.Translate.Knative != nil {
		t.Fatalf("without --knative: %+v, %v", opts.Translate.Knative, err)
	}

	f, err = parseServeFlags([]string{"--knative", "--knative-ingress-class=custom.ingress", "--knative-certificate-class=custom.cert",
		"--knative-local-service=ns/local", "--knative-external-http-port=9080", "--knative-cluster-domain=corp.local"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	opts, err = f.pipelineOptions()
	if err != nil {
		t.Fatal(err)
	}
	s := opts.Translate.Knative
	if s == nil || s.IngressClass != "custom.ingress" || s.CertificateClass != "custom.cert" ||
		s.LocalService != (types.NamespacedName{Namespace: "ns", Name: "local"}) || s.ExternalHTTPPort != 9080 ||
		s.ExternalHTTPSPort != 8443 || s.LocalHTTPPort != 8081 || s.LocalHTTPSPort != 8444 || s.ClusterDomain != "corp.local" {
		t.Errorf("settings %+v", s)
	}

	f, err = parseServeFlags([]string{"--knative"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	opts, _ = f.pipelineOptions()
	if s := opts.Translate.Knative; s.IngressClass != knative.DefaultIngressClass || s.CertificateClass != knative.DefaultCertificateClass ||
		s.LocalService.String() != "portico-system/portico-internal" {
		t.Errorf("defaults %+v", s)
	}

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--config=x.yaml", "--knative"}, "for cluster mode"},
		{[]string{"--knative", "--knative-local-http-port=8080"}, "must differ"},
		{[]string{"--knative", "--knative-local-service=nope"}, "--knative-local-service"},
		{[]string{"--knative", "--knative-external-https-port=70000"}, "out of range"},
	} {
		f, err := parseServeFlags(c.args, io.Discard)
		if err == nil {
			_, err = f.pipelineOptions()
		}
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: error %v, want one saying %q", c.args, err, c.want)
		}
	}
}
