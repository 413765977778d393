package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// The command line's conventions, shared by every subcommand: flags are written --name
// VALUE or --name=VALUE (booleans only --name or --name=false), every flag of the main
// command and of `ingress proxy` may also come from the environment as INGRESS_<NAME>
// (the command line wins), a refused value says what a good one looks like, and -h,
// --help or `ingress help COMMAND` print the usage on stdout and exit 0.

// envPrefix starts the environment variable that stands for a flag.
const envPrefix = "INGRESS_"

// envName is the environment variable of a flag: INGRESS_ and the name in upper case,
// dashes as underscores (--state-dir: INGRESS_STATE_DIR).
func envName(flagName string) string {
	return envPrefix + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// helpRequest is returned by a command asked for its usage (-h, --help): realMain prints
// the usage on stdout and exits 0.
type helpRequest struct {
	cmd string
	fs  *flag.FlagSet // the command's flags; nil when it has none
}

func (h helpRequest) Error() string { return "help requested" }

// parseFlags parses args into fs for the command cmd ("" for the ingress itself). With
// lookup, flags first take their values from INGRESS_* variables. Every refusal is a
// configError whose text names the flag (or variable), says what a valid value looks
// like, and points at the usage; -h and --help return a helpRequest. Arguments left over
// are refused, with a hint when they look like a boolean flag's value written after a
// space.
func parseFlags(fs *flag.FlagSet, cmd string, args []string, lookup func(string) (string, bool)) error {
	friendlyValues(fs)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	if lookup != nil {
		var problems []error
		fs.VisitAll(func(f *flag.Flag) {
			name := envName(f.Name)
			if v, ok := lookup(name); ok {
				if err := fs.Set(f.Name, v); err != nil {
					problems = append(problems, fmt.Errorf("%s=%q: %v", name, v, err))
				}
			}
		})
		if len(problems) > 0 {
			return configError{errors.Join(problems...)}
		}
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return helpRequest{cmd: cmd, fs: fs}
		}
		return configError{fmt.Errorf("%s (%s lists every flag)", doubleDash(err.Error()), helpCommand(cmd))}
	}
	if fs.NArg() > 0 {
		return configError{leftoverError(fs, cmd, args)}
	}
	return nil
}

// helpCommand is the command line that prints cmd's usage.
func helpCommand(cmd string) string {
	if cmd == "" {
		return "ingress -h"
	}
	return "ingress " + cmd + " -h"
}

// doubleDash rewrites the flag package's "-name" in its messages as "--name", the form
// this command documents.
func doubleDash(msg string) string {
	for _, p := range []string{"flag -", "defined: -", "argument: -", " for -"} {
		msg = strings.Replace(msg, p, p+"-", 1)
	}
	return msg
}

// leftoverError explains arguments the flags did not take.
func leftoverError(fs *flag.FlagSet, cmd string, args []string) error {
	rest := fs.Args()
	at := len(args) - len(rest)
	if at > 0 && (rest[0] == "true" || rest[0] == "false") {
		prev := args[at-1]
		name := strings.TrimLeft(prev, "-")
		if f := fs.Lookup(name); f != nil && !strings.Contains(prev, "=") && isBoolFlag(f) {
			return fmt.Errorf("%s %s: a boolean flag takes its value after '=' (write --%s=%s; --%s alone means true)",
				prev, rest[0], name, rest[0], name)
		}
	}
	what := "ingress"
	if cmd != "" {
		what = "ingress " + cmd
	}
	return fmt.Errorf("unexpected arguments %q: %s takes flags only (%s lists them)", rest, what, helpCommand(cmd))
}

func isBoolFlag(f *flag.Flag) bool {
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// friendlyValues wraps the duration and boolean flags of fs so that a refused value says
// what a valid one looks like (the flag package only says "parse error").
func friendlyValues(fs *flag.FlagSet) {
	fs.VisitAll(func(f *flag.Flag) {
		switch v := f.Value.(type) {
		case durationFlag, boolFlag:
			return
		case flag.Getter:
			switch v.Get().(type) {
			case time.Duration:
				f.Value = durationFlag{v}
			case bool:
				if isBoolFlag(f) {
					f.Value = boolFlag{v}
				}
			}
		}
	})
}

// durationFlag is a duration flag whose refusal says what a duration looks like.
type durationFlag struct{ flag.Getter }

func (d durationFlag) Set(s string) error {
	if err := d.Getter.Set(s); err != nil {
		if _, nerr := strconv.ParseFloat(s, 64); nerr == nil {
			return fmt.Errorf("must be a duration such as 30s: a number needs a unit (ms, s, m or h), for example %ss", s)
		}
		return errors.New("must be a duration such as 30s (a number with a unit: ms, s, m or h; 1m30s)")
	}
	return nil
}

// boolFlag is a boolean flag whose refusal says which values it takes.
type boolFlag struct{ flag.Getter }

func (b boolFlag) Set(s string) error {
	if err := b.Getter.Set(s); err != nil {
		return errors.New("must be true or false")
	}
	return nil
}

func (b boolFlag) IsBoolFlag() bool { return true }

// commandUsage is the head of each command's usage; the flags follow it.
var commandUsage = map[string]string{
	"": `ingress: the serve.zone cluster ingress

Usage:
  ingress [flags]                          the cluster's ingress: registers with the relay that the
                                           SERVEZONE_* variables name and serves its route tables
  ingress --routes FILE [flags]            standalone: serve the route table in FILE, no relay
  ingress proxy --from HOST --to ADDR ...  quick start: one route from the command line, no file
                                           (--acme: with a certificate obtained over ACME)
  ingress validate [--relay] FILE | -      check a route file as the running ingress would; exit 0 or 2
  ingress demo [flags]                     a development relay, two backends and the ingress on
                                           loopback, with curl lines to try
  ingress healthcheck [--live] [ADDR|URL]  ask the admin listener's /readyz (or /healthz); exit 0 or 1
  ingress version                          print the version (also: ingress --version)
  ingress help [COMMAND]                   this text, or a command's

Environment:
  SERVEZONE_CLUSTER_INGRESS_BEARER       relay mode: the registration bearer (a secret, never
                                         logged); or SERVEZONE_CLUSTER_INGRESS_BEARER_FILE
                                         naming a file that holds it
  SERVEZONE_CLUSTER_RELAY_ORIGIN         relay mode: https://host[:port] of the cluster's relay
  SERVEZONE_CLUSTER_NODE_ID              the node the ingress runs on (also named in standalone
                                         statistics when set)
  INGRESS_<FLAG>                         any flag below, e.g. INGRESS_STATE_DIR=/var/lib/ingress
                                         for --state-dir; the command line wins
  GOGC, GOMEMLIMIT                       Go runtime tuning (defaults: GOGC=200 and 90% of the
                                         cgroup memory limit)

Signals: SIGTERM or SIGINT stops gracefully (stop accepting, drain, save state, exit 0; a
second one stops at once). SIGHUP re-reads the routes file and its certificate files
(standalone, proxy) or pulls the route table from the relay (relay mode, demo).

Exit status: 0 after a graceful stop, 2 when the configuration is refused (flags,
environment, route file, state directory, a listener that cannot bind), 1 otherwise.

Examples:
  ingress demo
  ingress proxy --from app.example.test --to 127.0.0.1:3000 --http-addr :8080
  ingress validate /etc/ingress/routes.json
  ingress --routes /etc/ingress/routes.json --state-dir /var/lib/ingress
  SERVEZONE_CLUSTER_INGRESS_BEARER_FILE=/run/secrets/bearer \
  SERVEZONE_CLUSTER_RELAY_ORIGIN=https://relay.example.com SERVEZONE_CLUSTER_NODE_ID=node-1 \
    ingress --state-dir /var/lib/ingress

More: README.md, docs/flags.md (every flag), docs/standalone.md (the route file),
docs/deployment.md (building, containers, Kubernetes, systemd).

Flags (--name VALUE or --name=VALUE; booleans --name or --name=false; durations with a
unit: 500ms, 30s, 2m, 1h):
`,
	"demo": `Usage: ingress demo [flags]

Starts, in this process and on loopback, a development relay, two demo backends and the
ingress registered with that relay, prints curl lines to try, and runs until Ctrl-C
(SIGINT) or SIGTERM, then exits 0. SIGHUP makes the ingress pull its route table again.
INGRESS_* variables are not read.

The ingress binds 127.0.0.1:8080 (plain HTTP), 127.0.0.1:8443 (TLS, and HTTP/3 on UDP)
and its admin listener 127.0.0.1:9090; --http-addr, --https-addr and --admin-addr change
them (127.0.0.1:0 picks a free port; the curl lines name the ports bound).

Flags (the ingress's, with loopback defaults):
`,
	"proxy": `Usage: ingress proxy --from HOST --to ADDR [--to ADDR]... [--tls-cert FILE --tls-key FILE] [flags]
       ingress proxy --from HOST --to ADDR [--to ADDR]... --acme --state-dir DIR \
         --acme-email ADDRESS --acme-agree [flags]

Quick start without a route file: serves one route, HOST, balanced over the targets
(power of two choices, with passive health checks). With --tls-cert and --tls-key HOST is
also served over TLS (and HTTP/3) with that certificate, and over plain HTTP too unless
--redirect-http is given; the files are re-read when they change and on SIGHUP. With
--acme the certificate is obtained from an ACME CA (Let's Encrypt unless --acme-ca) and
renewed before it expires, kept with the account key under --state-dir; --acme-email and
--acme-agree (the CA's terms of service) are required, and the CA must reach HOST on
--http-addr (port 80) or --https-addr (443). Every flag of the ingress applies (INGRESS_*
variables too), --routes and the relay aside.

Examples:
  ingress proxy --from app.example.test --to 127.0.0.1:3000 --http-addr :8080
  ingress proxy --from app.example.test --to 10.0.0.5:3000 --to 10.0.0.6:3000 \
    --tls-cert app.crt --tls-key app.key --redirect-http
  ingress proxy --from app.example.com --to 127.0.0.1:3000 --acme --redirect-http \
    --state-dir /var/lib/ingress --acme-email ops@example.com --acme-agree

Flags:
`,
	"validate": `Usage: ingress validate [--relay] FILE
       ingress validate [--relay] -        (the file on standard input)

Checks a route file with the same decoder and validator as the running ingress: the JSON
(syntax errors with line and column), every rule of the table with its JSON path, and the
certificates (parsable, the key matches the leaf, the leaf covers each hostname that uses
it). Certificate files named by certificateFile/privateKeyFile are read relative to the
file's directory (the current directory for -). Prints every violation and exits 2, or
prints a summary and exits 0; warnings (a certificate expired, or expiring within 14
days) do not change the exit status.

Flags:
`,
	"healthcheck": `Usage: ingress healthcheck [--live] [--timeout DURATION] [ADDR | URL]

Asks the admin listener whether the ingress is ready (/readyz: a route table applied and
the listeners up) or, with --live, merely running (/healthz). Exits 0 when it answers 200,
1 otherwise (as container health checks expect). ADDR is host:port or :port (an empty or
unspecified host means loopback); a URL (http://host:port/path) is asked as it is. Without
either, the address is INGRESS_ADMIN_ADDR when set (the variable that also sets the
ingress's --admin-addr), else 127.0.0.1:9090.

Flags:
`,
	"version": `Usage: ingress version   (or ingress --version)

Prints the ingress's version.
`,
}

// hiddenFlags are flags a command has (so that using one gets a refusal that says why)
// but does not list: `ingress proxy` and the demo have no relay and no routes file.
var hiddenFlags = map[string][]string{
	"proxy": {"routes", "relay-ca", "allow-insecure-relay"},
	"demo":  {"routes", "relay-ca", "allow-insecure-relay"},
}

// placeholders name the value of flags whose type says too little.
var placeholders = map[string]string{
	"routes": "FILE", "relay-ca": "FILE", "cpuprofile": "FILE", "state-dir": "DIR",
	"trusted-proxies": "CIDRS", "proxy-protocol-from": "CIDRS", "log-level": "LEVEL", "log-format": "FORMAT",
	"from": "HOST", "to": "ADDR", "tls-cert": "FILE", "tls-key": "FILE",
}

// writeUsage prints cmd's usage: its head, then each flag of fs with its default and
// its environment variable (when the command reads them).
func writeUsage(w io.Writer, cmd string, fs *flag.FlagSet, env bool) {
	head, ok := commandUsage[cmd]
	if !ok {
		head = "Usage: ingress " + cmd + " [flags]\n\nFlags:\n"
	}
	fmt.Fprint(w, head)
	if fs == nil {
		return
	}
	var flags []*flag.Flag
	fs.VisitAll(func(f *flag.Flag) {
		if !slices.Contains(hiddenFlags[cmd], f.Name) {
			flags = append(flags, f)
		}
	})
	sort.Slice(flags, func(i, j int) bool { return flags[i].Name < flags[j].Name })
	for _, f := range flags {
		fmt.Fprintf(w, "  --%s%s\n", f.Name, placeholder(f))
		var notes []string
		switch {
		case isBoolFlag(f) && f.DefValue == "true":
			notes = append(notes, "default true; --"+f.Name+"=false turns it off")
		case isBoolFlag(f):
			notes = append(notes, "default false")
		case f.DefValue != "" && f.DefValue != "0" && f.DefValue != "[]":
			def := f.DefValue
			if g, ok := f.Value.(flag.Getter); ok {
				if _, isString := g.Get().(string); isString {
					def = strconv.Quote(def)
				}
			}
			notes = append(notes, "default "+def)
		}
		if env {
			notes = append(notes, envName(f.Name))
		}
		text := f.Usage
		if len(notes) > 0 {
			text += " (" + strings.Join(notes, "; ") + ")"
		}
		for _, line := range wrap(text, 80-8) {
			fmt.Fprintf(w, "        %s\n", line)
		}
	}
}

// placeholder is " NAME" for a flag that takes a value, "" for a boolean.
func placeholder(f *flag.Flag) string {
	if isBoolFlag(f) {
		return ""
	}
	if p, ok := placeholders[f.Name]; ok {
		return " " + p
	}
	if strings.HasSuffix(f.Name, "-addr") {
		return " ADDR"
	}
	if g, ok := f.Value.(flag.Getter); ok {
		switch g.Get().(type) {
		case time.Duration:
			return " DURATION"
		case int, int64, uint, uint64:
			return " N"
		}
	}
	name, _ := flag.UnquoteUsage(f)
	if name == "" || name == "value" || name == "string" {
		return " VALUE"
	}
	return " " + strings.ToUpper(name)
}

// wrap breaks s into lines of at most width characters at spaces.
func wrap(s string, width int) []string {
	var lines []string
	line := ""
	for _, word := range strings.Fields(s) {
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
