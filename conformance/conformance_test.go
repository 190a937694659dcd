package conformance

import (
	"context"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/sets"
	clientset "k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
	gwv1alpha2 "sigs.k8s.io/gateway-api/apis/v1alpha2"
	gwv1alpha3 "sigs.k8s.io/gateway-api/apis/v1alpha3"
	gwv1beta1 "sigs.k8s.io/gateway-api/apis/v1beta1"
	upstream "sigs.k8s.io/gateway-api/conformance"
	confv1 "sigs.k8s.io/gateway-api/conformance/apis/v1"
	"sigs.k8s.io/gateway-api/conformance/tests"
	"sigs.k8s.io/gateway-api/conformance/utils/suite"
	"sigs.k8s.io/gateway-api/pkg/features"
	"sigs.k8s.io/yaml"

	"portico.dev/portico/conformance/harness"
)

// The flags are prefixed: the suite's own package registers flags of its
// own on the same command line.
var (
	porticoBin    = flag.String("portico.binary", "", "the portico binary to test (hack/conformance.sh builds it)")
	echoBasicBin  = flag.String("portico.echo-basic", "", "the echo-basic binary that runs the suite's backends")
	runDir        = flag.String("portico.run-dir", "", "directory for the logs of this run (default: a new temporary one)")
	reportDir     = flag.String("portico.report-dir", "reports", "where the report and the results table of a full run go")
	version       = flag.String("portico.version", "dev", "the Portico version named in the report")
	runTest       = flag.String("portico.run-test", "", "run only the test with this short name; no report is written")
	channel       = flag.String("portico.channel", "standard", "the Gateway API release channel whose CRDs the run installs: standard or experimental")
	perGateway    = flag.Bool("portico.per-gateway", false, "run with a GatewayClass whose Gateways each get a data plane of their own (PorticoParameters mode PerGateway); its report is per-gateway")
	extraFeatures = flag.String("portico.extra-features", "", "comma-separated features to run on top of the claimed ones, to try one before claiming it; no report is written")
)

const (
	gatewayClass   = "portico"
	controllerName = "portico.dev/gateway-controller"
)

// outputNames are the report and the results table of a run on channel,
// in shared or per-Gateway mode.
func outputNames(channel string, perGateway bool) (report, results string) {
	if perGateway {
		return channel + "-per-gateway-report.yaml", "RESULTS-" + channel + "-per-gateway.md"
	}
	if channel == "standard" {
		return "standard-default-report.yaml", "RESULTS.md"
	}
	return channel + "-default-report.yaml", "RESULTS-" + channel + ".md"
}

// suiteMode is the implementation mode the report names.
func suiteMode(perGateway bool) string {
	if perGateway {
		return "per-gateway"
	}
	return "default"
}

func TestConformance(t *testing.T) {
	if *porticoBin == "" || *echoBasicBin == "" {
		t.Skip("needs -portico.binary and -portico.echo-basic; run hack/conformance.sh")
	}
	if os.Geteuid() != 0 {
		t.Skip("the process kubelet makes network namespaces and a bridge, and Portico binds ports below 1024: run as root")
	}
	started := time.Now()
	dir := *runDir
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp("", "portico-conformance-"); err != nil {
			t.Fatal(err)
		}
	}
	ctrllog.SetLogger(zap.New(zap.WriteTo(os.Stdout), zap.UseDevMode(true)))

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cluster, err := harness.Start(ctx, harness.Options{
		Portico:        *porticoBin,
		EchoBasic:      *echoBasicBin,
		Dir:            dir,
		GatewayClass:   gatewayClass,
		ControllerName: controllerName,
		Logf:           t.Logf,
		Channel:        *channel,
		PerGateway:     *perGateway,
		ParametersCRD:  "../deploy/porticoparameters.yaml",
	})
	if err != nil {
		t.Fatalf("%v\nlogs in %s", err, dir)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the logs of Portico, the control plane and every pod are in %s", dir)
		}
		if err := cluster.Stop(); err != nil {
			t.Errorf("stop: %v", err)
		}
	})

	base, leftOut, err := baseManifests(upstream.Manifests, cluster.Images)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range leftOut {
		t.Logf("base manifests: %s %s/%s left out: %s", l.Kind, l.Namespace, l.Name, l.Reason)
	}
	skips, err := imageSkips(upstream.Manifests, tests.ConformanceTests, cluster.Images)
	if err != nil {
		t.Fatal(err)
	}
	for name, reason := range SkippedTests {
		skips[name] = reason
	}

	claimedList, notClaimed := claims(*channel, *perGateway)
	claimed := sets.New(claimedList...)
	supported := claimed.Clone()
	for _, f := range strings.Split(*extraFeatures, ",") {
		if f = strings.TrimSpace(f); f != "" {
			supported.Insert(features.FeatureName(f))
		}
	}
	var profiles []suite.ConformanceProfile
	for _, name := range Profiles {
		p, err := profileByName(name)
		if err != nil {
			t.Fatal(err)
		}
		profiles = append(profiles, p)
		supported = supported.Union(p.CoreFeatures)
	}

	scheme, err := newScheme()
	if err != nil {
		t.Fatal(err)
	}
	clientOptions := client.Options{Scheme: scheme}
	c, err := client.New(cluster.Config, clientOptions)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := clientset.NewForConfig(cluster.Config)
	if err != nil {
		t.Fatal(err)
	}
	results := &Results{Supported: supported, NotClaimed: notClaimed, Skips: skips}
	opts := suite.ConformanceOptions{
		ConfigurableOptions: suite.ConfigurableOptions{
			GatewayClassName: gatewayClass,
			// Everything goes with the control plane at the end.
			CleanupBaseResources: false,
			// Tests reuse ports and hostnames: each one's objects must go
			// before the next.
			CleanupTestResources: true,
			SupportedFeatures:    sets.List(supported),
			SkipTests:            sets.List(sets.KeySet(skips)),
			RunTest:              *runTest,
			Mode:                 suiteMode(*perGateway),
			TimeoutConfig:        Timeouts(),
			// For GatewayStaticAddresses: a Gateway asking for an address
			// of the pool gets it, one asking for any other is not
			// programmed.
			UsableNetworkAddresses:   []gwv1.GatewaySpecAddress{{Type: ptr.To(gwv1.IPAddressType), Value: cluster.StaticAddress().String()}},
			UnusableNetworkAddresses: []gwv1.GatewaySpecAddress{{Type: ptr.To(gwv1.IPAddressType), Value: cluster.UnusableAddress().String()}},
			ConformanceProfiles:      Profiles,
			Implementation: confv1.Implementation{
				Organization: "portico",
				Project:      "portico",
				URL:          "https://portico.dev",
				Version:      *version,
				Contact:      []string{"https://portico.dev"},
			},
		},
		Client:        c,
		ClientOptions: clientOptions,
		Clientset:     cs,
		RestConfig:    cluster.Config,
		BaseManifests: BaseManifestsPath,
		ManifestFS:    []fs.FS{fstest.MapFS{BaseManifestsPath: {Data: base}}, &upstream.Manifests},
		Hook:          results.Hook,
	}
	cSuite, err := suite.NewConformanceTestSuite(opts)
	if err != nil {
		t.Fatal(err)
	}
	// The suite allows a report only once its run is over, which it marks
	// in a clean-up of its own: this one, registered first, runs after it.
	ranAll := false
	t.Cleanup(func() {
		if !ranAll {
			return
		}
		report, err := cSuite.Report()
		if err != nil {
			t.Errorf("report: %v", err)
			return
		}
		ran := results.Tests()
		var total Counts
		for _, p := range profiles {
			c := Total(p, ran)
			total.Passed += c.Passed
			total.Failed += c.Failed
			total.Skipped += c.Skipped
		}
		took := time.Since(started).Round(time.Second)
		outDir := *reportDir
		if *runTest != "" || *extraFeatures != "" {
			// A partial or exploratory run leaves the published results alone.
			outDir = dir
		}
		if err := writeOutputs(outDir, report, profiles, ran, claimed, notClaimed, took); err != nil {
			t.Errorf("write results: %v", err)
		}
		summary := Summary(total)
		if err := os.WriteFile(filepath.Join(dir, "summary.txt"), []byte(summary+"\n"), 0o644); err != nil {
			t.Errorf("write summary: %v", err)
		}
		t.Logf("report and results in %s; run took %v", outDir, took)
		t.Log(summary)
	})
	cSuite.Setup(t, tests.ConformanceTests)
	if err := cSuite.Run(t, tests.ConformanceTests); err != nil {
		t.Fatal(err)
	}
	ranAll = true
}

func writeOutputs(dir string, report *confv1.ConformanceReport, profiles []suite.ConformanceProfile, ran []TestResult,
	claimed sets.Set[features.FeatureName], notClaimed map[features.FeatureName]string, took time.Duration) error {
	reportName, resultsName := outputNames(*channel, *perGateway)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	raw, err := yaml.Marshal(report)
	if err != nil {
		return fmt.Errorf("report: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, reportName), raw, 0o644); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	header := fmt.Sprintf("# Gateway API conformance results\n\n"+
		"Gateway API %s (%s channel), Portico %s, %s. Produced by `hack/conformance.sh` in %v; "+
		"the upstream report is [%s](%s).\n",
		report.GatewayAPIVersion, report.GatewayAPIChannel, report.Implementation.Version, report.Date, took, reportName, reportName)
	md := Markdown(header, profiles, ran, claimed, notClaimed)
	if err := os.WriteFile(filepath.Join(dir, resultsName), []byte(md), 0o644); err != nil {
		return fmt.Errorf("results: %w", err)
	}
	return nil
}

func profileByName(name suite.ConformanceProfileName) (suite.ConformanceProfile, error) {
	// The suite's GATEWAY-GRPC profile leaves out GRPCRoute's own extended
	// features, whose tests need GRPCRoute and nothing else of another
	// profile: they are counted with it here.
	grpc := suite.GatewayGRPCConformanceProfile
	grpc.ExtendedFeatures = grpc.ExtendedFeatures.Clone().Insert(features.SetsToNamesSet(features.GRPCRouteExtendedFeatures).UnsortedList()...)
	for _, p := range []suite.ConformanceProfile{
		suite.GatewayHTTPConformanceProfile,
		suite.GatewayTLSConformanceProfile,
		grpc,
		suite.GatewayTCPConformanceProfile,
		suite.GatewayUDPConformanceProfile,
	} {
		if p.Name == name {
			return p, nil
		}
	}
	return suite.ConformanceProfile{}, fmt.Errorf("unknown conformance profile %s", name)
}

// newScheme knows the kinds the suite reads and writes. The suite recreates
// its clients per test from ClientOptions, so the scheme travels there.
func newScheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{
		clientgoscheme.AddToScheme,
		apiextensionsv1.AddToScheme,
		gwv1.Install,
		gwv1beta1.Install,
		gwv1alpha2.Install,
		gwv1alpha3.Install,
	} {
		if err := add(s); err != nil {
			return nil, fmt.Errorf("scheme: %w", err)
		}
	}
	return s, nil
}
