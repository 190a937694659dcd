// Command oidc-provider is the OpenID provider Portico's OIDC tests log in
// against: the example provider of github.com/zitadel/oidc/v3 (its storage,
// login page and op handlers, unchanged), started with an issuer and one
// confidential web client whose redirect URIs the test names.
//
//	oidc-provider -listen 127.0.0.1:0 -redirect http://127.0.0.1:8080/oauth2/callback
//
// The first line on stdout is the issuer URL, once the socket is bound. The
// users are the example's: test-user2 / verysecure, among others.
package main

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/zitadel/oidc/v3/example/server/exampleop"
	"github.com/zitadel/oidc/v3/example/server/storage"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:0", "address to listen on")
	redirect := flag.String("redirect", "", "comma-separated redirect URIs of the client")
	clientID := flag.String("client-id", "web", "client ID of the confidential web client")
	secret := flag.String("client-secret", "secret", "client secret of the web client")
	flag.Parse()
	if err := run(*listen, *redirect, *clientID, *secret); err != nil {
		fmt.Fprintln(os.Stderr, "oidc-provider:", err)
		os.Exit(1)
	}
}

func run(listen, redirect, clientID, secret string) error {
	if redirect == "" {
		return errors.New("-redirect is required")
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	// The issuer is the bound address, so that a port chosen by the kernel
	// (":0") is the one in every token and discovery document.
	issuer := "http://" + ln.Addr().String() + "/"
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	storage.RegisterClients(storage.WebClient(clientID, secret, strings.Split(redirect, ",")...))
	store := storage.NewStorage(storage.NewUserStore(issuer))
	router := exampleop.SetupServer(issuer, store, logger, false)
	fmt.Println(issuer)
	srv := &http.Server{Handler: router, ReadHeaderTimeout: 10 * time.Second}
	return srv.Serve(ln)
}
