package main

import (
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
)

// parkedWorker is what a goroutine dump shows for each -idle-goroutines goroutine.
func parkedWorker(never <-chan struct{}) {
	<-never
}

// startIdle parks n goroutines forever: a large, uniform goroutine dump.
func startIdle(n int) {
	never := make(chan struct{})
	for i := 0; i < n; i++ {
		go parkedWorker(never)
	}
}

// startPprof serves the standard pprof handlers on addr, on their own mux, from the start
// of the process (so a goroutine dump is available even while start-up hangs). It binds
// before it returns, so the listener is up before the first phase is reported.
func startPprof(addr string) {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		fmt.Fprintf(os.Stderr, "fake-envd: pprof on %s: %v\n", addr, err)
		return
	}
	go func() {
		if err := http.Serve(ln, mux); err != nil {
			fmt.Fprintf(os.Stderr, "fake-envd: pprof on %s: %v\n", addr, err)
		}
	}()
}
