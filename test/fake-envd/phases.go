package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"sync"
	"time"
)

// phase is one step of envd's run() (packages/envd/main.go), in order.
// name is the PHASE= value sent to NOTIFY_SOCKET; desc is the human STATUS=.
type phase struct {
	name string
	desc string
}

// phases is envd's real start-up order (reference note §1.1).
// "listen" is last unless -listen-first moves it to the front.
var phases = []phase{
	{"run-dir", "creating run directory /run/e2b"},        // os.MkdirAll(host.E2BRunDir), .E2B_SANDBOX
	{"mmds-poller", "starting MMDS poller"},               // go host.PollForMMDSOpts
	{"logger", "creating logger"},                         // logs.NewLogger
	{"router", "creating HTTP router"},                    // chi.NewRouter
	{"filesystem-rpc", "mounting filesystem RPC service"}, // filesystemRpc.Handle
	{"cgroup-manager", "creating cgroup manager"},         // createCgroupManager
	{"workload-freezer", "creating workload freezer"},     // cgroups.NewWorkloadFreezer, SetThawWatchdog
	{"process-rpc", "mounting process RPC service"},       // processRpc.Handle
	{"api", "creating API store"},                         // api.New
	{"port-scanner", "starting port scanner"},             // publicport.NewScanner, go ScanAndBroadcast
	{"port-forwarder", "starting port forwarder"},         // NewForwarder, go StartForwarding
	{"listen", "binding HTTP listener"},                   // s.ListenAndServe
}

func phaseNames() []string {
	names := make([]string, len(phases))
	for i, p := range phases {
		names[i] = p.name
	}
	return names
}

func isPhaseName(name string) bool {
	for _, p := range phases {
		if p.name == name {
			return true
		}
	}
	return false
}

// startup carries the state run() builds up, like the locals of envd's run().
type startup struct {
	cfg      *config
	ctx      context.Context
	notifier *notifier
	server   *server
	cgroups  *cgroupManager
}

func newStartup(cfg *config) *startup {
	return &startup{cfg: cfg, ctx: context.Background(), notifier: newNotifier(cfg.noNotify)}
}

// order returns the phases in the order this run walks them.
func (st *startup) order() []phase {
	if !st.cfg.listenFirst {
		return phases
	}
	// The proposed envd fix: bind the port first, do everything else after.
	out := make([]phase, 0, len(phases))
	for _, p := range phases {
		if p.name == "listen" {
			out = append([]phase{p}, out...)
		} else {
			out = append(out, p)
		}
	}
	return out
}

// run walks every phase: announce it, then enter it.
func (st *startup) run() {
	for _, p := range st.order() {
		st.announce(p)
		st.runPhase(p)
	}
}

// announce reports the phase about to be entered on NOTIFY_SOCKET and stderr.
func (st *startup) announce(p phase) {
	status := "envd startup: " + p.desc
	if p.name == "listen" {
		status += " on " + net.JoinHostPort(st.cfg.addr, strconv.Itoa(st.cfg.port))
	}
	st.stamp(p.name)
	st.notifier.send(fmt.Sprintf("PHASE=%s\nSTATUS=%s\n", p.name, status))
	fmt.Fprintln(os.Stderr, status)
}

// stamp appends what happened and the wall clock to -stamp-file: a benchmark on the same host
// times the probe and the collector from the moment itself, not from what they report of it.
func (st *startup) stamp(what string) {
	if st.cfg.stampFile == "" {
		return
	}
	f, err := os.OpenFile(st.cfg.stampFile, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err == nil {
		_, err = fmt.Fprintf(f, "%s %d\n", what, time.Now().UnixMilli())
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "fake-envd: -stamp-file: %v\n", err)
		os.Exit(1)
	}
}

// runPhase dispatches to a function named after the envd code it stands for, so a
// goroutine dump (SIGQUIT) of a hung fake-envd names the phase it is stuck in.
func (st *startup) runPhase(p phase) {
	switch p.name {
	case "run-dir":
		ensureRunDir(st, p)
	case "mmds-poller":
		startMMDSPoller(st, p)
	case "logger":
		newLogger(st, p)
	case "router":
		newRouter(st, p)
	case "filesystem-rpc":
		handleFilesystemRPC(st, p)
	case "cgroup-manager":
		st.cgroups = createCgroupManager(st, p)
	case "workload-freezer":
		newWorkloadFreezer(st, p)
	case "process-rpc":
		handleProcessRPC(st, p)
	case "api":
		newAPI(st, p)
	case "port-scanner":
		newPortScanner(st, p)
	case "port-forwarder":
		newPortForwarder(st, p)
	case "listen":
		listenAndServe(st, p)
	default:
		panic("fake-envd: no implementation for phase " + p.name)
	}
}

// work is the phase's own cost: -slow (or -slow-phase NAME=...), then -crash-in.
func (st *startup) work(p phase) {
	d := st.cfg.slow
	if pd, ok := st.cfg.slowPhase[p.name]; ok {
		d = pd
	}
	if d > 0 {
		time.Sleep(d)
	}
	if st.cfg.crashIn == p.name {
		crash(st.cfg.crashMode, p)
	}
}

func (st *startup) hangs(p phase) bool { return st.cfg.hangIn == p.name }

// maybeHang blocks forever in the generic way if -hang-in names this phase.
func (st *startup) maybeHang(p phase) {
	if st.hangs(p) {
		blockForever(p.name)
	}
}

// crash ends the process inside phase p, as -crash-in / -crash-mode ask.
func crash(mode string, p phase) {
	msg := fmt.Sprintf("simulated crash in phase %s (-crash-in)", p.name)
	if mode == "panic" {
		panic("fake-envd: " + msg) // Go runtime: stack trace on stderr, exit status 2
	}
	// envd: run() returns an error and main() does log.Fatalf("server stopped: %v").
	fmt.Fprintf(os.Stderr, "fake-envd: server stopped: %s\n", msg)
	os.Exit(1)
}

// blockForever waits on a mutex that is already locked and never unlocked, so a
// goroutine dump shows "sync.(*Mutex).Lock" under main.blockForever under the
// phase's function. Other goroutines (MMDS poller, signal handler) keep running.
//
//go:noinline
func blockForever(phase string) {
	var mu sync.Mutex
	mu.Lock()
	mu.Lock() // never returns
	_ = phase
}

// ---- the phases, named after envd's functions ----

//go:noinline
func ensureRunDir(st *startup, p phase) {
	// Simulated: fake-envd does not touch /run/e2b.
	st.work(p)
	st.maybeHang(p)
}

//go:noinline
func startMMDSPoller(st *startup, p phase) {
	st.work(p)
	st.maybeHang(p)
	if st.cfg.mmdsAddr == "" {
		return // like envd -isnotfc: no MMDS, and no outbound traffic at all
	}
	base := "http://" + st.cfg.mmdsAddr
	if st.cfg.mmdsStorm > 0 {
		fmt.Fprintf(os.Stderr, "fake-envd: mmds: starting %d pollers against %s that never stop (-mmds-storm)\n", st.cfg.mmdsStorm, base)
		for i := 0; i < st.cfg.mmdsStorm; i++ {
			go pollForMMDSOpts(st.ctx, base, false)
		}
		return
	}
	go pollForMMDSOpts(st.ctx, base, true)
}

//go:noinline
func newLogger(st *startup, p phase) {
	st.work(p)
	st.maybeHang(p)
}

//go:noinline
func newRouter(st *startup, p phase) {
	st.work(p)
	st.maybeHang(p)
}

//go:noinline
func handleFilesystemRPC(st *startup, p phase) {
	st.work(p)
	st.maybeHang(p)
}

// cgroupManager stands in for envd's cgroups.Cgroup2Manager.
type cgroupManager struct {
	root string
	mu   sync.Mutex // guards the cgroup root
}

// createCgroupManager mirrors envd's main.createCgroupManager: host.GetMetrics()
// (the -slow cost), then NewCgroup2Manager, which needs the cgroup root. Under
// -hang-in cgroup-manager the root is already held (think: a cgroupfs write that
// never returns), so acquireRoot blocks forever in sync.(*Mutex).Lock.
//
//go:noinline
func createCgroupManager(st *startup, p phase) *cgroupManager {
	st.work(p)
	m := &cgroupManager{root: "/sys/fs/cgroup"}
	if st.hangs(p) {
		m.mu.Lock() // the holder that never lets go
	}
	m.acquireRoot()
	defer m.releaseRoot()
	// Simulated: mkdir <root>/{ptys,socats,user}, write cpu/io/memory properties.
	return m
}

//go:noinline
func (m *cgroupManager) acquireRoot() {
	m.mu.Lock()
}

func (m *cgroupManager) releaseRoot() {
	m.mu.Unlock()
}

//go:noinline
func newWorkloadFreezer(st *startup, p phase) {
	st.work(p)
	st.maybeHang(p)
}

//go:noinline
func handleProcessRPC(st *startup, p phase) {
	st.work(p)
	st.maybeHang(p)
}

//go:noinline
func newAPI(st *startup, p phase) {
	st.work(p)
	st.maybeHang(p)
}

//go:noinline
func newPortScanner(st *startup, p phase) {
	st.work(p)
	st.maybeHang(p)
}

//go:noinline
func newPortForwarder(st *startup, p phase) {
	st.work(p)
	st.maybeHang(p)
}

// listenAndServe binds the port and starts serving (envd: s.ListenAndServe()).
//
//go:noinline
func listenAndServe(st *startup, p phase) {
	st.work(p)
	st.maybeHang(p)
	s, err := listen(st.cfg.addr, st.cfg.port, st.cfg.noAccept)
	if err != nil {
		fmt.Fprintf(os.Stderr, "fake-envd: server stopped: %v\n", err)
		os.Exit(1)
	}
	st.server = s
	st.stamp("bound")
}
