package kubetest

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"portico.dev/portico/internal/testkit/proc"
	"strconv"
	"testing"
	"time"
)

// ControllerManagerControllers are the controllers StartControllerManager
// runs: what Deployments, Services and Namespaces need to behave as in a
// cluster, short of scheduling and running pods.
const ControllerManagerControllers = "deployment-controller,replicaset-controller," +
	"endpointslice-controller,namespace-controller,garbage-collector-controller," +
	"serviceaccount-controller,serviceaccount-token-controller," +
	"root-ca-certificate-publisher-controller"

// StartControllerManager runs kube-controller-manager against the Env with
// ControllerManagerControllers, as the administrator and without leader
// election, and waits until it reports healthy. Stop stops it first.
func (e *Env) StartControllerManager(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for attempt := 0; ; attempt++ {
		err := e.startControllerManager(ctx)
		if err == nil || attempt == 2 || !errors.Is(err, proc.ErrPortTaken) {
			return err
		}
	}
}

// StartControllerManagerT is StartControllerManager for a test.
func (e *Env) StartControllerManagerT(t testing.TB) {
	t.Helper()
	if err := e.StartControllerManager(context.Background()); err != nil {
		t.Fatalf("kubetest: %v\n%s", err, e.Logs(8<<10))
	}
}

func (e *Env) startControllerManager(ctx context.Context) error {
	ports, err := freePorts(1)
	if err != nil {
		return err
	}
	p, err := e.start("kube-controller-manager",
		"--kubeconfig="+e.kubeconfig,
		"--authentication-kubeconfig="+e.kubeconfig,
		"--authorization-kubeconfig="+e.kubeconfig,
		"--bind-address=127.0.0.1",
		"--secure-port="+strconv.Itoa(ports[0]),
		"--cert-dir="+filepath.Join(e.Dir, "controller-manager-certs"),
		"--leader-elect=false",
		"--controllers="+ControllerManagerControllers,
		"--service-account-private-key-file="+e.pki.saKeyFile,
		"--root-ca-file="+e.pki.caCertFile,
		"--profiling=false",
	)
	if err != nil {
		return err
	}
	// Its serving certificate is self-signed at start-up, and /healthz
	// carries nothing worth protecting.
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	defer client.CloseIdleConnections()
	url := "https://127.0.0.1:" + strconv.Itoa(ports[0]) + "/healthz"
	return proc.WaitReady(ctx, p, 100*time.Millisecond, func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("healthz: %s", resp.Status)
		}
		return nil
	})
}
