package acme_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddyserver/certmagic"
	"go.uber.org/zap"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"portico.dev/portico/kube/secretstorage"
)

// replicaEnv carries a replicaConfig to the test binary run as the other
// replica.
const replicaEnv = "PORTICO_ACME_TEST_REPLICA"

// replicaConfig is what the other replica needs: the API server, the
// storage namespace and the ACME directory its issuer is keyed by.
type replicaConfig struct {
	Host, Token, CA string
	Namespace       string
	DirectoryURL    string
}

// replica is the other process.
type replica struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  chan string
	stderr *bytes.Buffer
}

// startReplica runs TestChallengeReplica in a child process that serves
// HTTP-01 answers on ln, and waits until it serves.
func startReplica(t *testing.T, ln net.Listener, cfg replicaConfig) *replica {
	t.Helper()
	lnFile, err := ln.(*net.TCPListener).File()
	if err != nil {
		t.Fatal(err)
	}
	// From here on only the child accepts on the socket.
	_ = ln.Close()
	defer lnFile.Close()
	b, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestChallengeReplica$")
	cmd.Env = append(os.Environ(), replicaEnv+"="+string(b))
	cmd.ExtraFiles = []*os.File{lnFile} // fd 3 in the child
	r := &replica{cmd: cmd, lines: make(chan string, 16), stderr: &bytes.Buffer{}}
	cmd.Stderr = r.stderr
	if r.stdin, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			r.lines <- sc.Text()
		}
		close(r.lines)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("other replica's stderr:\n%s", r.stderr.Bytes())
		}
	})
	if _, err := r.await("ready"); err != nil {
		t.Fatalf("other replica: %v", err)
	}
	return r
}

// await returns the first line of the child that starts with prefix.
func (r *replica) await(prefix string) (string, error) {
	timeout := time.After(30 * time.Second)
	for {
		select {
		case line, ok := <-r.lines:
			if !ok {
				return "", errors.New("exited")
			}
			if strings.HasPrefix(line, prefix) {
				return line, nil
			}
		case <-timeout:
			return "", fmt.Errorf("no %q line within 30s", prefix)
		}
	}
}

// stop ends the child and returns how many requests it answered as
// challenges and how many it could not.
func (r *replica) stop(t *testing.T) (answered, missed int) {
	t.Helper()
	_ = r.stdin.Close()
	line, err := r.await("served")
	if err != nil {
		t.Fatalf("other replica: %v", err)
	}
	if _, err := fmt.Sscanf(line, "served %d missed %d", &answered, &missed); err != nil {
		t.Fatalf("other replica: %q: %v", line, err)
	}
	return answered, missed
}

// TestChallengeReplica is the other replica of TestObtainFromPebble, run in
// a process of its own; run directly it does nothing. It answers HTTP-01
// requests on the listener at fd 3 with nothing but its own Storage and
// issuer, prints "ready", and when its stdin closes prints how many requests
// it answered and exits.
func TestChallengeReplica(t *testing.T) {
	raw := os.Getenv(replicaEnv)
	if raw == "" {
		t.Skip("only runs as the other replica of TestObtainFromPebble")
	}
	var cfg replicaConfig
	if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
		t.Fatal(err)
	}
	client, err := kubernetes.NewForConfig(&rest.Config{
		Host:            cfg.Host,
		BearerToken:     cfg.Token,
		TLSClientConfig: rest.TLSClientConfig{CAData: []byte(cfg.CA)},
	})
	if err != nil {
		t.Fatal(err)
	}
	storage, err := secretstorage.New(client, secretstorage.Options{Namespace: cfg.Namespace, Identity: "replica-b"})
	if err != nil {
		t.Fatal(err)
	}
	var magic *certmagic.Config
	cache := certmagic.NewCache(certmagic.CacheOptions{
		GetConfigForCert: func(certmagic.Certificate) (*certmagic.Config, error) { return magic, nil },
		Logger:           zap.NewNop(),
	})
	defer cache.Stop()
	magic = certmagic.New(cache, certmagic.Config{Storage: storage, Logger: zap.NewNop()})
	iss := certmagic.NewACMEIssuer(magic, certmagic.ACMEIssuer{
		CA:                      cfg.DirectoryURL,
		TestCA:                  cfg.DirectoryURL,
		DisableTLSALPNChallenge: true,
		Logger:                  zap.NewNop(),
	})
	magic.Issuers = []certmagic.Issuer{iss}

	ln, err := net.FileListener(os.NewFile(3, "challenge-listener"))
	if err != nil {
		t.Fatal(err)
	}
	var answered, missed atomic.Int32
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if iss.HandleHTTPChallenge(w, r) {
				answered.Add(1)
				return
			}
			missed.Add(1)
			fmt.Fprintf(os.Stderr, "not a challenge it knows: %s %s\n", r.Host, r.URL)
			http.NotFound(w, r)
		}),
		ReadTimeout:  10 * time.Second,
		WriteTimeout: 10 * time.Second,
	}
	go func() { _ = srv.Serve(ln) }()
	fmt.Println("ready")
	_, _ = io.Copy(io.Discard, os.Stdin)
	_ = srv.Close()
	fmt.Printf("served %d missed %d\n", answered.Load(), missed.Load())
}
