package kubetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// binariesScript builds the control plane from the modules pinned in
// hack/kubebin and prints the directory that holds the binaries.
const binariesScript = "hack/kube-binaries.sh"

// RepoRoot finds the root of the Portico repository by walking up from the
// working directory, which for a test is its package directory.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("repo root: %w", err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, binariesScript)); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("repo root: no %s above the working directory", binariesScript)
		}
		dir = parent
	}
}

// Binaries makes sure etcd, kube-apiserver and kube-controller-manager are
// built and returns the directory that holds them. The first call on a machine
// builds them (minutes); later calls find them in the cache (seconds).
func Binaries(ctx context.Context, repoRoot string) (string, error) {
	cmd := exec.CommandContext(ctx, "bash", filepath.Join(repoRoot, binariesScript))
	cmd.Dir = repoRoot
	var stdout, stderr bytes.Buffer
	cmd.Stdout = &stdout
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%s: %w\n%s", binariesScript, err, stderr.Bytes())
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	dir := lines[len(lines)-1]
	if dir == "" {
		return "", errors.New(binariesScript + " printed no directory")
	}
	return dir, nil
}

// gatewayAPICRDDir returns the CRD directory of a channel ("" is
// "standard") of the gateway-api module version that the Portico module
// itself requires, so the API server serves exactly the types that Portico
// is compiled against.
func gatewayAPICRDDir(ctx context.Context, repoRoot, channel string) (string, error) {
	switch channel {
	case "":
		channel = "standard"
	case "standard", "experimental":
	default:
		return "", fmt.Errorf("Gateway API channel %q: want standard or experimental", channel)
	}
	cmd := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{.Dir}}", "sigs.k8s.io/gateway-api")
	cmd.Dir = repoRoot
	cmd.Env = append(os.Environ(), "GOWORK=off")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("locate sigs.k8s.io/gateway-api: %w\n%s", err, stderr.Bytes())
	}
	modDir := strings.TrimSpace(string(out))
	if modDir == "" {
		return "", errors.New("locate sigs.k8s.io/gateway-api: module is not downloaded")
	}
	return filepath.Join(modDir, "config", "crd", channel), nil
}
