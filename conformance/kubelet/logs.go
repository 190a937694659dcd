package kubelet

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Container logs are kept the way a container runtime keeps them: one line
// per output line, "<RFC 3339 time> <stream> <text>", so that the API
// server's pods/log (which the suite reads, e.g. to see mirrored requests)
// can ask for the lines since a time.

// lineWriter timestamps each complete line written to it.
type lineWriter struct {
	mu     *sync.Mutex // shared by a container's stdout and stderr
	out    io.Writer
	stream string
	buf    []byte
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			break
		}
		if err := w.emit(w.buf[:i]); err != nil {
			return 0, err
		}
		w.buf = w.buf[i+1:]
	}
	return len(p), nil
}

// Close writes what is left of an unterminated last line.
func (w *lineWriter) Close() error {
	if len(w.buf) == 0 {
		return nil
	}
	err := w.emit(w.buf)
	w.buf = nil
	return err
}

func (w *lineWriter) emit(line []byte) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	_, err := fmt.Fprintf(w.out, "%s %s %s\n", time.Now().UTC().Format(time.RFC3339Nano), w.stream, line)
	return err
}

// logOptions are the query parameters of the kubelet's containerLogs.
type logOptions struct {
	since      time.Time
	timestamps bool
	tail       int // < 0: all
	limitBytes int // <= 0: no limit
}

func parseLogOptions(q map[string][]string, now time.Time) (logOptions, error) {
	get := func(k string) string {
		if v := q[k]; len(v) > 0 {
			return v[0]
		}
		return ""
	}
	o := logOptions{tail: -1}
	if s := get("sinceTime"); s != "" {
		t, err := time.Parse(time.RFC3339, s)
		if err != nil {
			return o, fmt.Errorf("sinceTime: %w", err)
		}
		o.since = t
	}
	if s := get("sinceSeconds"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			return o, fmt.Errorf("sinceSeconds: %w", err)
		}
		o.since = now.Add(-time.Duration(n) * time.Second)
	}
	o.timestamps = get("timestamps") == "true"
	if s := get("tailLines"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			return o, fmt.Errorf("tailLines: %w", err)
		}
		o.tail = n
	}
	if s := get("limitBytes"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			return o, fmt.Errorf("limitBytes: %w", err)
		}
		o.limitBytes = n
	}
	return o, nil
}

// readLog returns the lines of a log file as the options select them.
func readLog(path string, o logOptions) ([]byte, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var lines []string
	s := bufio.NewScanner(f)
	s.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for s.Scan() {
		ts, rest, ok := strings.Cut(s.Text(), " ")
		if !ok {
			continue
		}
		t, err := time.Parse(time.RFC3339Nano, ts)
		if err != nil || t.Before(o.since) {
			continue
		}
		_, text, _ := strings.Cut(rest, " ") // drop the stream
		if o.timestamps {
			text = ts + " " + text
		}
		lines = append(lines, text)
	}
	if err := s.Err(); err != nil {
		return nil, err
	}
	if o.tail >= 0 && o.tail < len(lines) {
		lines = lines[len(lines)-o.tail:]
	}
	var out []byte
	for _, l := range lines {
		out = append(out, l...)
		out = append(out, '\n')
	}
	if o.limitBytes > 0 && len(out) > o.limitBytes {
		out = out[:o.limitBytes]
	}
	return out, nil
}

// serveLogs answers the API server's GET /containerLogs/{ns}/{pod}/{container}
// on addr over TLS, until ctx ends. The API server does not verify a
// kubelet's certificate unless told to, and sends no credentials here unless
// given a client certificate, so a self-signed certificate and no
// authentication are what this control plane expects.
func (k *Kubelet) serveLogs(ctx context.Context, addr string) error {
	cert, err := selfSigned(k.cfg.NodeName, net.ParseIP(k.hostIP()))
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("kubelet: log endpoint: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /containerLogs/{namespace}/{pod}/{container}", func(w http.ResponseWriter, r *http.Request) {
		key := r.PathValue("namespace") + "/" + r.PathValue("pod")
		k.mu.Lock()
		rt := k.running[key]
		k.mu.Unlock()
		if rt == nil {
			http.Error(w, "pod "+key+" does not run here", http.StatusNotFound)
			return
		}
		o, err := parseLogOptions(r.URL.Query(), time.Now())
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		data, err := readLog(rt.logPath(r.PathValue("container")), o)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "text/plain")
		_, _ = w.Write(data)
	})
	srv := &http.Server{
		Handler:           mux,
		TLSConfig:         &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
		ReadHeaderTimeout: 10 * time.Second,
	}
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	if err := srv.ServeTLS(ln, "", ""); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("kubelet: log endpoint: %w", err)
	}
	return nil
}

func selfSigned(name string, ip net.IP) (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("kubelet: key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(7 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     []string{name},
		IPAddresses:  []net.IP{ip},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("kubelet: certificate: %w", err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}
