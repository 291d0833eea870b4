package main

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"time"
)

// server is envd's HTTP server reduced to GET /health.
type server struct {
	ln net.Listener
}

// handler: GET /health → 204 with no body (auth-exempt in envd); anything else → 404.
func handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && r.URL.Path == "/health" {
			w.Header().Set("Cache-Control", "no-store")
			w.WriteHeader(http.StatusNoContent)
			return
		}
		http.NotFound(w, r)
	})
}

// listen binds addr:port and, unless noAccept, serves on it in the background.
// With noAccept the socket is bound and listening but Accept is never called,
// so connections complete the handshake and sit in the kernel accept queue.
func listen(addr string, port int, noAccept bool) (*server, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort(addr, strconv.Itoa(port)))
	if err != nil {
		return nil, err
	}
	s := &server{ln: ln}
	if !noAccept {
		srv := &http.Server{Handler: handler(), IdleTimeout: 640 * time.Second}
		go func() {
			// envd: run() returns the ListenAndServe error and main log.Fatalf's it.
			err := srv.Serve(ln)
			fmt.Fprintf(os.Stderr, "fake-envd: server stopped: %v\n", err)
			os.Exit(1)
		}()
	}
	return s, nil
}

func (s *server) addr() string { return s.ln.Addr().String() }

func (s *server) port() int { return s.ln.Addr().(*net.TCPAddr).Port }
