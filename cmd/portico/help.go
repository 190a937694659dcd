package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
)

const usage = `Portico: a Kubernetes Gateway API reverse proxy.

Usage:
  portico serve                 serve the Gateway API objects of the cluster Portico runs in
                                (or of --kubeconfig's), writing their status
  portico serve --config PATH   serve Gateway API objects from YAML files (standalone)
  portico check --config PATH   validate YAML files: print the status Portico would write
                                for every GatewayClass, Gateway, ListenerSet, HTTPRoute,
                                GRPCRoute, TLSRoute, TCPRoute, UDPRoute, BackendTLSPolicy,
                                BackendTrafficPolicy, SecurityPolicy, ClientTrafficPolicy and
                                XBackendTrafficPolicy
                                in PATH, and on stderr a summary of every object that does
                                not fully serve
                                (-o config: the data plane's configuration instead)
  portico echo  --listen ADDR   run a small HTTP backend that echoes requests as JSON
  portico version               print the version, commit and Go release of this build
                                (also: portico --version)
  portico help [COMMAND]        print this, or a command's flags (as "portico COMMAND -h")

Exit codes: 0 success; 1 the command could not do its job (a bad flag, input check
refuses, a failure to start); 2 no command or an unknown one; 3 check: the input is
valid but some object does not fully serve.
`

// commands are the commands run knows, for suggestions.
var commands = []string{"serve", "check", "echo", "version", "help"}

// helpRequest is the error parseFlags returns for -h: run prints the
// command's help to standard output and exits 0.
type helpRequest struct{ fs *flag.FlagSet }

func (h *helpRequest) Error() string { return "help requested" }
func (h *helpRequest) Unwrap() error { return flag.ErrHelp }

// newFlagSet is a command's flag set; parseFlags reports its errors.
func newFlagSet(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs
}

// parseFlags parses a command's flags without the flag package's own
// output: -h becomes a helpRequest, and an unknown flag one line that
// names the closest known flag.
func parseFlags(fs *flag.FlagSet, args []string) error {
	out := fs.Output()
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	err := fs.Parse(args)
	fs.SetOutput(out)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, flag.ErrHelp):
		return &helpRequest{fs}
	}
	if name, ok := strings.CutPrefix(err.Error(), "flag provided but not defined: -"); ok {
		var known []string
		fs.VisitAll(func(f *flag.Flag) {
			if !deprecated(f) {
				known = append(known, f.Name)
			}
		})
		hint := ""
		if s := closest(name, known); s != "" {
			hint = fmt.Sprintf("; did you mean --%s?", s)
		}
		return fmt.Errorf("unknown flag --%s%s (portico help %s lists the flags)", name, hint, fs.Name())
	}
	return err
}

// closest is the candidate nearest to s by edit distance, if it is near
// enough to be a typo of it: at most a third of its length, and at most 3.
func closest(s string, candidates []string) string {
	best, bestDist := "", min(3, max(1, len(s)/3))+1
	for _, c := range candidates {
		if d := editDistance(s, c); d < bestDist {
			best, bestDist = c, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance of a and b, in bytes.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// flagGroup is a section of a command's help.
type flagGroup struct {
	title string
	flags []string
}

// serveGroups sorts serve's flags by the mode they are for. Every flag
// is in one group (TestServeHelpGroupsEveryFlag).
var serveGroups = []flagGroup{
	{"Every mode", []string{"controller-name", "bind-address", "gateway-address-pool", "holdoff", "min-holdoff", "max-delay",
		"drain-timeout", "request-id", "session-key-file", "merge-slashes", "escaped-slashes", "memory-limit", "gc-percent"}},
	{"Standalone (serve --config PATH)", []string{"config", "max-config-bytes", "fail-on-bind-error", "echo-backend"}},
	{"Cluster (serve without --config)", []string{"kubeconfig", "namespace", "identity", "gateway-address", "gateway-service",
		"leader-election-id", "leader-election-lease-duration", "leader-election-renew-deadline", "leader-election-retry-period",
		"kube-api-qps", "kube-api-burst", "status-workers", "session-key-secret"}},
	{"Per-Gateway controller (cluster mode, classes whose PorticoParameters say mode: PerGateway)", []string{"data-plane-image",
		"data-plane-image-pull-policy", "data-plane-controller-address", "data-plane-listen", "data-plane-tls-secret"}},
	{"Per-Gateway data plane (how the controller runs the pods it provisions)", []string{"gateway", "controller-address",
		"controller-token", "controller-ca"}},
	{"Knative (cluster mode, KIngress)", []string{"knative", "knative-ingress-class", "knative-certificate-class", "knative-cluster-domain",
		"knative-external-service", "knative-external-http-port", "knative-external-https-port",
		"knative-local-service", "knative-local-http-port", "knative-local-https-port"}},
	{"ACME (certificates for listeners that ask for them)", []string{"acme-directory", "acme-email", "acme-ca-bundle",
		"acme-eab-key-id", "acme-eab-hmac-key", "acme-eab-hmac-key-file", "acme-concurrency", "data-dir"}},
	{"Limits", []string{"max-connections-per-port", "max-connections-per-client", "client-idle-timeout", "client-min-rate",
		"client-rate-window", "stream-idle-timeout", "udp-max-sessions-per-port", "udp-session-idle-timeout", "backend-response-timeout", "max-request-headers", "max-request-header-bytes",
		"max-informational-responses", "http2-max-glitches", "http2-glitches-forgiven"}},
	{"Observability", []string{"log-format", "log-level", "access-log", "admin-address", "pprof", "metrics-max-routes", "metrics-max-backends",
		"tracing-endpoint", "tracing-protocol", "tracing-insecure", "tracing-sample-ratio", "tracing-service-name"}},
}

// commandHelp is what "portico help COMMAND" and "portico COMMAND -h"
// print.
var commandHelp = map[string]string{
	"serve":   "Usage: portico serve [--config PATH] [flags]\n\nServe Gateway API objects: of YAML files with --config (standalone), else of the\ncluster Portico runs in.\n",
	"check":   "Usage: portico check --config PATH [-o yaml|json|config]\n\nValidate YAML files as serve --config would read them. Prints every GatewayClass,\nGateway, ListenerSet, HTTPRoute, GRPCRoute, TLSRoute, TCPRoute, UDPRoute,\nBackendTLSPolicy, BackendTrafficPolicy, SecurityPolicy, ClientTrafficPolicy and\nXBackendTrafficPolicy with the status Portico would write, and on stderr a summary of every object that does not fully serve. Exit 0: every object is accepted and programmed; 1: the input is\nrefused; 3: it is valid, but some object does not fully serve.\n",
	"echo":    "Usage: portico echo --listen ADDR [--name NAME]\n\nRun a small HTTP backend that answers every request with it as JSON.\n",
	"version": "Usage: portico version [-o text|json]\n\nPrint the version, the commit and the Go release of this build.\n",
}

// writeHelp prints a command's help: its text, then its flags, by group
// for serve. Deprecated flags come last.
func writeHelp(w io.Writer, fs *flag.FlagSet) error {
	var b strings.Builder
	b.WriteString(commandHelp[fs.Name()])
	groups := []flagGroup{{title: "Flags"}}
	if fs.Name() == "serve" {
		groups = slices.Clone(serveGroups)
	}
	var other, old []string
	fs.VisitAll(func(f *flag.Flag) {
		switch {
		case deprecated(f):
			old = append(old, f.Name)
		case fs.Name() != "serve":
			groups[0].flags = append(groups[0].flags, f.Name)
		case !slices.ContainsFunc(groups, func(g flagGroup) bool { return slices.Contains(g.flags, f.Name) }):
			other = append(other, f.Name)
		}
	})
	groups = append(groups, flagGroup{"Other", other}, flagGroup{"Deprecated (still accepted)", old})
	for _, g := range groups {
		var flags []*flag.Flag
		for _, name := range g.flags {
			if f := fs.Lookup(name); f != nil {
				flags = append(flags, f)
			}
		}
		if len(flags) == 0 {
			continue
		}
		fmt.Fprintf(&b, "\n%s:\n", g.title)
		for _, f := range flags {
			writeFlag(&b, f)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func writeFlag(b *strings.Builder, f *flag.Flag) {
	name, text := flag.UnquoteUsage(f)
	fmt.Fprintf(b, "  --%s", f.Name)
	if name != "" {
		fmt.Fprintf(b, " %s", name)
	}
	b.WriteString("\n")
	if !slices.Contains([]string{"", "0", "false", "0s", "[]"}, f.DefValue) && !strings.Contains(text, "(default") {
		def := f.DefValue
		if name == "string" {
			def = strconv.Quote(def)
		}
		text += " (default " + def + ")"
	}
	for _, line := range wrap(text, 80-8) {
		fmt.Fprintf(b, "        %s\n", line)
	}
}

// wrap breaks text into lines of at most width bytes, at spaces.
func wrap(text string, width int) []string {
	var lines []string
	line := ""
	for _, word := range strings.Fields(text) {
		if line != "" && len(line)+1+len(word) > width {
			lines = append(lines, line)
			line = ""
		}
		if line != "" {
			line += " "
		}
		line += word
	}
	return append(lines, line)
}

// deprecatedPrefix starts the usage of a flag kept under an old name.
const deprecatedPrefix = "deprecated: "

func deprecated(f *flag.Flag) bool { return strings.HasPrefix(f.Usage, deprecatedPrefix) }

// deprecatedAlias defines old as another name of the flag current, which
// must be defined already; each use of old is added to used, for a
// deprecation line in the log.
func deprecatedAlias(fs *flag.FlagSet, old, current string, used *[]string) {
	target := fs.Lookup(current)
	fs.Func(old, deprecatedPrefix+"use --"+current, func(v string) error {
		*used = append(*used, old)
		return target.Value.Set(v)
	})
}

// unknownCommand is run's answer to a command it does not know: one line,
// with the nearest command when there is one.
func unknownCommand(w io.Writer, name string) {
	hint := ""
	if s := closest(name, commands); s != "" {
		hint = fmt.Sprintf("; did you mean %q?", s)
	}
	fmt.Fprintf(w, "portico: unknown command %q%s (portico help lists them)\n", name, hint)
}
