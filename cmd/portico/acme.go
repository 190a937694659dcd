package main

import (
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"

	"github.com/caddyserver/certmagic"
	"go.uber.org/zap"

	"portico.dev/portico/internal/controlplane/acme"
	"portico.dev/portico/proxy"
)

// acmeFlags are the ACME settings of serve.
type acmeFlags struct {
	directory, email, caBundle, eabKeyID, eabMACKey, dataDir *string
	eabMACKeyFile                                            *string
	concurrency                                              *int
}

func newACMEFlags(fs *flag.FlagSet) acmeFlags {
	return acmeFlags{
		directory:     fs.String("acme-directory", certmagic.LetsEncryptProductionCA, "ACME directory URL for listeners annotated portico.dev/acme: http-01"),
		email:         fs.String("acme-email", "", "contact email of the ACME account (optional)"),
		caBundle:      fs.String("acme-ca-bundle", "", "PEM file of CAs to trust for the ACME directory, in place of the system roots (a private ACME server)"),
		eabKeyID:      fs.String("acme-eab-key-id", "", "External Account Binding key ID, for CAs that require one"),
		eabMACKey:     fs.String("acme-eab-hmac-key", "", "External Account Binding HMAC key (base64url); prefer --acme-eab-hmac-key-file, as a command line is visible to every user of the host"),
		eabMACKeyFile: fs.String("acme-eab-hmac-key-file", "", "file holding the External Account Binding HMAC key (base64url), such as a mounted Secret's key"),
		concurrency:   fs.Int("acme-concurrency", 4, "ACME orders in flight at once"),
		dataDir:       fs.String("data-dir", "portico-data", "standalone mode: directory for state that must survive restarts (ACME accounts and certificates under acme/); a cluster keeps it in Secrets of Portico's namespace"),
	}
}

// dataDirSet reports whether --data-dir was given.
func (f acmeFlags) dataDirSet(fs *flag.FlagSet) bool {
	given := false
	fs.Visit(func(fl *flag.Flag) { given = given || fl.Name == "data-dir" })
	return given
}

// lateChallenges hands ACME challenge requests to a handler set after the
// data plane was made (the ACME manager; a data plane's controller stream);
// until then none is answered.
type lateChallenges struct {
	h atomic.Pointer[proxy.ChallengeHandler]
}

// set is the ACME manager, or in a data plane the controller it asks.
func (l *lateChallenges) set(h proxy.ChallengeHandler) { l.h.Store(&h) }

func (l *lateChallenges) HandleHTTPChallenge(w http.ResponseWriter, r *http.Request) bool {
	h := l.h.Load()
	return h != nil && (*h).HandleHTTPChallenge(w, r)
}

// managerOptions turns the flags into acme.Options over storage.
func (f acmeFlags) managerOptions(storage certmagic.Storage, log *zap.Logger) (acme.Options, error) {
	opts := acme.Options{
		Directory:   *f.directory,
		Email:       *f.email,
		EABKeyID:    *f.eabKeyID,
		EABMACKey:   *f.eabMACKey,
		Storage:     storage,
		Concurrency: *f.concurrency,
		Logger:      log,
	}
	if *f.eabMACKeyFile != "" {
		if *f.eabMACKey != "" {
			return opts, errors.New("--acme-eab-hmac-key and --acme-eab-hmac-key-file: give one")
		}
		key, err := os.ReadFile(*f.eabMACKeyFile)
		if err != nil {
			return opts, fmt.Errorf("--acme-eab-hmac-key-file: %w", err)
		}
		opts.EABMACKey = strings.TrimSpace(string(key))
	}
	if *f.concurrency < 1 {
		return opts, errors.New("--acme-concurrency must be at least 1")
	}
	if *f.caBundle != "" {
		pem, err := os.ReadFile(*f.caBundle)
		if err != nil {
			return opts, fmt.Errorf("--acme-ca-bundle: %w", err)
		}
		opts.TrustedRoots = x509.NewCertPool()
		if !opts.TrustedRoots.AppendCertsFromPEM(pem) {
			return opts, fmt.Errorf("--acme-ca-bundle: no PEM certificate in %s", *f.caBundle)
		}
	}
	return opts, nil
}

// fileStorage is the ACME storage of standalone mode.
func (f acmeFlags) fileStorage() *certmagic.FileStorage {
	return &certmagic.FileStorage{Path: filepath.Join(*f.dataDir, "acme")}
}
