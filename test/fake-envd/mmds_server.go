package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"time"
)

// The -serve-mmds mode: the binary runs only a fake MMDS (Firecracker's microVM metadata
// service, as envd's PollForMMDSOpts sees it) and nothing of envd: no phases, no notify,
// no envd listener. It only listens; it never contacts anything.
//
//	PUT /latest/api/token → 200, body mmdsToken
//	GET /                 → 404 (-mmds-reply 404, the default: envd-style pollers never
//	                        succeed and keep polling), or 200 with mmdsOptsJSON (-mmds-reply ok)
//	anything else         → 404
//
// Every response says "Connection: close", and then the server waits (at most
// mmdsPeerCloseWait) for the client to close first. The client's socket, not the server's,
// so ends in TIME_WAIT, as in a real microVM where the MMDS lives in the VMM and every
// socket left behind by a poll storm is one of envd's. A client that keeps the connection
// open is cut off after mmdsPeerCloseWait.

const (
	mmdsToken         = "fake-mmds-token"
	mmdsOptsJSON      = `{"instanceID":"sbx-fake","envID":"tmpl-fake","address":"","accessTokenHash":""}`
	mmdsPeerCloseWait = 2 * time.Second
)

// mmdsRoute answers one request: status, content type and body.
func mmdsRoute(r *http.Request, reply string) (int, string, string) {
	switch {
	case r.Method == http.MethodPut && r.URL.Path == "/latest/api/token":
		return http.StatusOK, "text/plain", mmdsToken
	case r.Method == http.MethodGet && r.URL.Path == "/" && reply == "ok":
		return http.StatusOK, "application/json", mmdsOptsJSON
	default:
		return http.StatusNotFound, "text/plain", "Not Found"
	}
}

func mmdsHandler(reply string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Drain a (small) request body before the connection is taken over.
		_, _ = io.Copy(io.Discard, io.LimitReader(r.Body, 64<<10))
		status, ctype, body := mmdsRoute(r, reply)
		hj, ok := w.(http.Hijacker)
		if !ok {
			w.Header().Set("Content-Type", ctype)
			w.Header().Set("Connection", "close")
			w.WriteHeader(status)
			_, _ = io.WriteString(w, body)
			return
		}
		conn, rw, err := hj.Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(mmdsPeerCloseWait))
		fmt.Fprintf(rw, "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %d\r\nConnection: close\r\n\r\n",
			status, http.StatusText(status), ctype, len(body))
		if r.Method != http.MethodHead {
			_, _ = rw.WriteString(body)
		}
		if rw.Flush() != nil {
			return
		}
		// Let the client close first: read until its FIN (EOF), an error or the deadline.
		buf := make([]byte, 512)
		for {
			if _, err := conn.Read(buf); err != nil {
				return
			}
		}
	})
}

// serveMMDS runs the fake MMDS on cfg.serveMMDS until the process is killed.
// Once the socket is listening it writes cfg.readyFile (if given), atomically.
func serveMMDS(cfg *config) {
	ln, err := net.Listen("tcp", cfg.serveMMDS)
	if err != nil {
		fmt.Fprintf(os.Stderr, "fake-envd: mmds: %v\n", err)
		os.Exit(1)
	}
	get := "404"
	if cfg.mmdsReply == "ok" {
		get = "200 " + mmdsOptsJSON
	}
	fmt.Fprintf(os.Stderr, "fake-envd: mmds: serving a fake MMDS on %s (PUT /latest/api/token → 200, GET / → %s)\n", ln.Addr(), get)
	if cfg.readyFile != "" {
		tmp := cfg.readyFile + ".tmp"
		if err := os.WriteFile(tmp, []byte(ln.Addr().String()+"\n"), 0o644); err == nil {
			err = os.Rename(tmp, cfg.readyFile)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "fake-envd: mmds: -ready-file: %v\n", err)
			os.Exit(1)
		}
	}
	srv := &http.Server{
		Handler:           mmdsHandler(cfg.mmdsReply),
		ReadHeaderTimeout: 5 * time.Second,
		IdleTimeout:       5 * time.Second,
	}
	err = srv.Serve(ln)
	fmt.Fprintf(os.Stderr, "fake-envd: mmds: server stopped: %v\n", err)
	os.Exit(1)
}
