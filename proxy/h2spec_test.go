package proxy

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/xml"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"portico.dev/portico/config"
	"portico.dev/portico/internal/shared/chunked"
	"portico.dev/portico/internal/shared/hostname"
	"portico.dev/portico/internal/testkit/snitest"
	"portico.dev/portico/sni"
)

// h2specEnv names the h2spec binary that TestH2Spec runs; hack/test.sh
// builds it (hack/h2spec.sh) and sets it, so that CI never skips the test.
const h2specEnv = "PORTICO_H2SPEC"

// h2specHost is the name h2spec connects to: it sends it as SNI (an
// address would send none) and in :authority.
const h2specHost = "localhost"

// TestH2Spec runs h2spec, the HTTP/2 conformance tester, against a port of
// Portico's HTTP/2 server over TLS and over cleartext (prior knowledge),
// with the production defaults (the frame guard in front), and fails
// naming every case that did not pass.
func TestH2Spec(t *testing.T) {
	bin := h2specBinary(t)
	rt := relRuntime(t, func(*Options) {})
	backend, _ := relBackend(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		// 6.9.2/2 needs a body of 5 bytes at least, or it is skipped.
		_, _ = io.WriteString(w, "hello from behind Portico\n")
	})
	tlsAddr, h2cAddr := h2specPorts(t, rt, backend)
	for _, tc := range []struct {
		name string
		port string
		args []string
	}{
		{"tls", tlsAddr, []string{"--tls", "--insecure"}},
		{"h2c", h2cAddr, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, port, _ := strings.Cut(tc.port, ":")
			runH2Spec(t, bin, append([]string{"--host", h2specHost, "--port", port}, tc.args...))
		})
	}
}

// h2specBinary is the h2spec binary named by PORTICO_H2SPEC or, without
// it, the one hack/h2spec.sh left in its cache; the test is skipped only
// when neither is there.
func h2specBinary(t *testing.T) string {
	t.Helper()
	if bin := os.Getenv(h2specEnv); bin != "" {
		if _, err := os.Stat(bin); err != nil {
			t.Fatalf("%s=%s: %v", h2specEnv, bin, err)
		}
		return bin
	}
	cache := os.Getenv("PORTICO_CACHE")
	if cache == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			t.Skipf("h2spec: %s is not set and there is no home directory to find its cache in: %v", h2specEnv, err)
		}
		cache = filepath.Join(home, ".cache", "portico")
	}
	found, _ := filepath.Glob(filepath.Join(cache, "bin", "h2spec-*", "h2spec"))
	if len(found) == 0 {
		t.Skipf("h2spec is not built: run hack/h2spec.sh and set %s to the path it prints", h2specEnv)
	}
	slices.Sort(found)
	return found[len(found)-1]
}

// h2specPorts applies an HTTPS port serving h2specHost and a plain HTTP
// port, both routing everything to backend, and returns their addresses.
func h2specPorts(t *testing.T, rt *Runtime, backend string) (tlsAddr, h2cAddr string) {
	t.Helper()
	ca, err := snitest.NewCA()
	if err != nil {
		t.Fatal(err)
	}
	pair, err := ca.Issue(snitest.ECDSA, 2, h2specHost)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := sni.ParseKeyPair(pair.CertPEM, pair.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	l := &config.Listener{Key: "Gateway/ns/gw/https", Hostname: h2specHost, Routes: routeTable(t, "svc")}
	tlsPort, h2cPort := freePort(t), freePort(t)
	cfg := httpPortConfig(t, tlsPort, "svc", backend)
	cfg.Ports[0].Protocol = config.HTTPS
	cfg.Ports[0].All = chunked.Of([]*config.Listener{l})
	cfg.Ports[0].Listeners = hostname.NewTable([]string{h2specHost}, []*config.Listener{l})
	cfg.Ports[0].SNI = sni.NewTable([]*sni.Entry{{Hostname: h2specHost, Certificates: []*tls.Certificate{cert}, Value: l}})
	// One Apply for both: a Config is every port the Runtime serves.
	cfg.Ports = append(cfg.Ports, httpPortConfig(t, h2cPort, "svc", backend).Ports[0])
	if err := rt.Apply(cfg); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("127.0.0.1:%d", tlsPort), fmt.Sprintf("127.0.0.1:%d", h2cPort)
}

// runH2Spec runs h2spec with args and fails with each case that failed.
func runH2Spec(t *testing.T, bin string, args []string) {
	t.Helper()
	report := filepath.Join(t.TempDir(), "report.xml")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	// A case waits this long for an answer that does not come; h2spec's
	// default, 2 s, is short on a loaded machine.
	args = append(args, "--timeout", "5", "--junit-report", report)
	out, runErr := exec.CommandContext(ctx, bin, args...).CombinedOutput()
	data, err := os.ReadFile(report)
	if err != nil {
		t.Fatalf("h2spec %s wrote no report (%v): %v\n%s", strings.Join(args, " "), runErr, err, out)
	}
	res, err := parseH2SpecReport(data)
	if err != nil {
		t.Fatalf("h2spec report: %v\n%s", err, out)
	}
	t.Logf("h2spec: %d of %d passed", res.total-len(res.failed), res.total)
	if res.total == 0 {
		t.Fatalf("h2spec ran no case:\n%s", out)
	}
	if len(res.failed) > 0 {
		// h2spec's own account of each failure (what it expected, what it
		// got) follows its list of every case, which says nothing more.
		detail := out
		if i := bytes.LastIndex(out, []byte("Failures:")); i >= 0 {
			detail = out[i:]
		}
		t.Errorf("h2spec: %d of %d cases failed:\n  %s\n\n%s",
			len(res.failed), res.total, strings.Join(res.failed, "\n  "), detail)
	} else if runErr != nil {
		t.Errorf("h2spec failed with every case passed: %v\n%s", runErr, out)
	}
}

// h2specResult is what a run of h2spec reported: how many cases ran, and
// the ones that did not pass as "<section>/<case> <description>" (as
// "http2/4.2/3 Sends a large size HEADERS frame ...").
type h2specResult struct {
	total  int
	failed []string
}

// parseH2SpecReport reads h2spec's JUnit report. A case is named as h2spec
// names it in its own output, by its section and its place in the section
// (counted from 1); a skipped case counts as failed, since h2spec skips
// only what it could not run.
func parseH2SpecReport(data []byte) (h2specResult, error) {
	var report struct {
		Suites []struct {
			// Package is the section as h2spec names it: http2/4.2.
			Package string `xml:"package,attr"`
			Cases   []struct {
				Desc    string    `xml:"classname,attr"`
				Failure *struct{} `xml:"failure"`
				Error   *struct{} `xml:"error"`
				Skipped *struct{} `xml:"skipped"`
			} `xml:"testcase"`
		} `xml:"testsuite"`
	}
	// h2spec writes what it got verbatim, NUL bytes of a PING's payload
	// too, which XML does not allow.
	data = bytes.Map(func(r rune) rune {
		if r < ' ' && r != '\t' && r != '\n' && r != '\r' {
			return -1
		}
		return r
	}, data)
	if err := xml.Unmarshal(data, &report); err != nil {
		return h2specResult{}, fmt.Errorf("decoding the JUnit report: %w", err)
	}
	var res h2specResult
	for _, s := range report.Suites {
		for i, c := range s.Cases {
			res.total++
			if c.Failure != nil || c.Error != nil || c.Skipped != nil {
				res.failed = append(res.failed, fmt.Sprintf("%s/%d %s", s.Package, i+1, c.Desc))
			}
		}
	}
	return res, nil
}
