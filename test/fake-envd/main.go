// Command fake-envd is a test fixture that imitates the start-up of E2B's envd
// (packages/envd/main.go, run()) closely enough to exercise a stuck-envd
// diagnosis tool without a Firecracker VM.
//
// It walks envd's real start-up order as a list of named phases (phases.go),
// announces each phase to $NOTIFY_SOCKET (notify.go) and to stderr, and finally
// serves GET /health on -addr:-port (server.go). Flags let a test make it slow,
// hang or crash in any phase, bind its listener early (-listen-first), never
// accept (-no-accept), or hammer a fake MMDS endpoint (mmds.go).
//
// With -serve-mmds HOST:PORT it is something else entirely: only a fake MMDS HTTP
// server (mmds_server.go), with no phases, no notify and no envd listener.
//
// SAFETY: the only network address this program ever contacts is -mmds-addr,
// and only when that flag is given. Everything else is a listener or the
// NOTIFY_SOCKET unix datagram socket.
//
// Stdlib only; must build with Go 1.19.
package main

import (
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
	"time"
)

// config holds the parsed command line.
type config struct {
	addr        string
	port        int
	hangIn      string
	crashIn     string
	crashMode   string
	slow        time.Duration
	slowPhase   phaseDurations
	listenFirst bool
	noAccept    bool
	noNotify    bool
	mmdsAddr    string
	mmdsStorm   int
	exitAfter   time.Duration
	idle        int
	pprofAddr   string
	stampFile   string

	// -serve-mmds mode (mmds_server.go).
	serveMMDS string
	mmdsReply string
	readyFile string
}

// serveMMDSFlags are the only flags that apply with -serve-mmds.
var serveMMDSFlags = map[string]bool{"serve-mmds": true, "mmds-reply": true, "ready-file": true}

// phaseDurations implements flag.Value for the repeatable -slow-phase NAME=DURATION.
type phaseDurations map[string]time.Duration

func (p phaseDurations) String() string {
	parts := make([]string, 0, len(p))
	for name, d := range p {
		parts = append(parts, name+"="+d.String())
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}

func (p phaseDurations) Set(v string) error {
	name, dur, ok := strings.Cut(v, "=")
	if !ok {
		return fmt.Errorf("want NAME=DURATION, got %q", v)
	}
	if !isPhaseName(name) {
		return fmt.Errorf("unknown phase %q (phases: %s)", name, strings.Join(phaseNames(), ", "))
	}
	d, err := time.ParseDuration(dur)
	if err != nil {
		return err
	}
	if d < 0 {
		return fmt.Errorf("negative duration %q", dur)
	}
	p[name] = d
	return nil
}

func parseFlags(args []string) (*config, error) {
	cfg := &config{slowPhase: phaseDurations{}}
	fs := flag.NewFlagSet("fake-envd", flag.ContinueOnError)
	fs.StringVar(&cfg.addr, "addr", "0.0.0.0", "address to listen on")
	fs.IntVar(&cfg.port, "port", 49983, "port to listen on (0 = any free port)")
	fs.StringVar(&cfg.hangIn, "hang-in", "", "block forever inside this `PHASE` (process stays alive)")
	fs.StringVar(&cfg.crashIn, "crash-in", "", "crash inside this `PHASE`")
	fs.StringVar(&cfg.crashMode, "crash-mode", "exit", "how -crash-in crashes: exit (status 1) or panic (status 2)")
	fs.DurationVar(&cfg.slow, "slow", 2*time.Millisecond, "time each phase takes")
	fs.Var(cfg.slowPhase, "slow-phase", "time one phase takes, as `NAME=DURATION` (repeatable; overrides -slow)")
	fs.BoolVar(&cfg.listenFirst, "listen-first", false, "bind and serve before all other phases; READY=1 still comes after the last phase")
	fs.BoolVar(&cfg.noAccept, "no-accept", false, "bind the TCP listener but never accept")
	fs.BoolVar(&cfg.noNotify, "no-notify", false, "never write to $NOTIFY_SOCKET")
	fs.StringVar(&cfg.mmdsAddr, "mmds-addr", "", "`HOST:PORT` of a fake MMDS to poll (empty = no MMDS polling, no outbound traffic)")
	fs.IntVar(&cfg.mmdsStorm, "mmds-storm", 0, "start `N` MMDS pollers that never stop (envd's /init goroutine leak); needs -mmds-addr")
	fs.DurationVar(&cfg.exitAfter, "exit-after", 0, "after READY, exit 0 after this long (0 = never)")
	fs.IntVar(&cfg.idle, "idle-goroutines", 0, "start `N` goroutines parked on a channel forever (a big goroutine dump)")
	fs.StringVar(&cfg.pprofAddr, "pprof", "", "serve net/http/pprof on `HOST:PORT` from the start (a harmless goroutine dump)")
	fs.StringVar(&cfg.stampFile, "stamp-file", "", "as each phase is announced, and as \"bound\" once the listener is bound, append its name and the wall clock (Unix ms) to this `PATH`: the host's clock in a simulation (one kernel)")
	fs.StringVar(&cfg.serveMMDS, "serve-mmds", "", "run ONLY a fake MMDS HTTP server on `HOST:PORT` (no envd phases, notify or listener)")
	fs.StringVar(&cfg.mmdsReply, "mmds-reply", "404", "with -serve-mmds: what GET / answers, 404 (pollers keep polling) or ok (200 + JSON opts)")
	fs.StringVar(&cfg.readyFile, "ready-file", "", "with -serve-mmds: write this `PATH` once the MMDS socket listens")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	var set []string
	fs.Visit(func(f *flag.Flag) { set = append(set, f.Name) })
	if cfg.serveMMDS != "" {
		for _, name := range set {
			if !serveMMDSFlags[name] {
				return nil, fmt.Errorf("-%s does not apply with -serve-mmds (it runs only the fake MMDS; allowed: -serve-mmds, -mmds-reply, -ready-file)", name)
			}
		}
		if _, _, err := net.SplitHostPort(cfg.serveMMDS); err != nil {
			return nil, fmt.Errorf("-serve-mmds: want HOST:PORT: %v", err)
		}
		if cfg.mmdsReply != "404" && cfg.mmdsReply != "ok" {
			return nil, fmt.Errorf("-mmds-reply: want 404 or ok, got %q", cfg.mmdsReply)
		}
		return cfg, nil
	}
	for _, name := range set {
		if name == "mmds-reply" || name == "ready-file" {
			return nil, fmt.Errorf("-%s needs -serve-mmds", name)
		}
	}
	for flagName, phase := range map[string]string{"-hang-in": cfg.hangIn, "-crash-in": cfg.crashIn} {
		if phase != "" && !isPhaseName(phase) {
			return nil, fmt.Errorf("%s: unknown phase %q (phases: %s)", flagName, phase, strings.Join(phaseNames(), ", "))
		}
	}
	if cfg.crashMode != "exit" && cfg.crashMode != "panic" {
		return nil, fmt.Errorf("-crash-mode: want exit or panic, got %q", cfg.crashMode)
	}
	if cfg.port < 0 || cfg.port > 65535 {
		return nil, fmt.Errorf("-port: out of range: %d", cfg.port)
	}
	if cfg.slow < 0 || cfg.exitAfter < 0 {
		return nil, fmt.Errorf("-slow and -exit-after must not be negative")
	}
	if cfg.idle < 0 || cfg.idle > 1_000_000 {
		return nil, fmt.Errorf("-idle-goroutines: out of range: %d", cfg.idle)
	}
	if cfg.pprofAddr != "" {
		if _, _, err := net.SplitHostPort(cfg.pprofAddr); err != nil {
			return nil, fmt.Errorf("-pprof: want HOST:PORT: %v", err)
		}
	}
	if cfg.mmdsStorm < 0 {
		return nil, fmt.Errorf("-mmds-storm must not be negative")
	}
	if cfg.mmdsAddr != "" {
		if _, _, err := net.SplitHostPort(cfg.mmdsAddr); err != nil {
			return nil, fmt.Errorf("-mmds-addr: want HOST:PORT: %v", err)
		}
	} else if cfg.mmdsStorm > 0 {
		return nil, fmt.Errorf("-mmds-storm needs -mmds-addr (fake-envd never contacts an address it was not given)")
	}
	return cfg, nil
}

func main() {
	cfg, err := parseFlags(os.Args[1:])
	if err == flag.ErrHelp {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "fake-envd: %v\n", err)
		os.Exit(2)
	}

	// SIGTERM: exit 0 cleanly, whatever phase we are in (even while hung).
	// SIGQUIT is left to the Go runtime: goroutine dump on stderr, exit 2.
	sigterm := make(chan os.Signal, 1)
	signal.Notify(sigterm, syscall.SIGTERM)
	go func() {
		<-sigterm
		fmt.Fprintln(os.Stderr, "fake-envd: received SIGTERM, exiting")
		if cfg.readyFile != "" {
			_ = os.Remove(cfg.readyFile)
		}
		os.Exit(0)
	}()

	if cfg.serveMMDS != "" {
		serveMMDS(cfg) // never returns
	}

	startIdle(cfg.idle)
	if cfg.pprofAddr != "" {
		startPprof(cfg.pprofAddr)
	}

	st := newStartup(cfg)
	st.run()

	// Ready. Serve until killed.
	st.notifier.send(fmt.Sprintf("READY=1\nSTATUS=envd listening on :%d\n", st.server.port()))
	fmt.Fprintf(os.Stderr, "fake-envd: ready, listening on %s\n", st.server.addr())
	if cfg.exitAfter > 0 {
		time.AfterFunc(cfg.exitAfter, func() {
			fmt.Fprintf(os.Stderr, "fake-envd: -exit-after %s elapsed, exiting\n", cfg.exitAfter)
			os.Exit(0)
		})
	}
	select {}
}
