package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"
)

// pollForMMDSOpts imitates envd's host.PollForMMDSOpts (internal/host/mmds.go):
// every 50ms, PUT /latest/api/token then GET / against the MMDS address, each
// with a fresh no-keep-alive client and a 10s timeout. A tick that arrives while a
// request is still in flight is dropped (time.Ticker semantics), as in envd.
//
// With stopOnSuccess it returns at the first 200 for GET / (envd at start-up);
// without, it polls forever (the goroutines leaked by envd's POST /init handler).
//
// Errors (refused, reset, timeout, EADDRNOTAVAIL once the ephemeral ports are all in
// TIME_WAIT) are ignored and the poller waits for the next tick: it never exits on an
// error and never spins, at most one round trip per 50ms tick.
//
// base is "http://" + the -mmds-addr flag; nothing else is ever contacted.
func pollForMMDSOpts(ctx context.Context, base string, stopOnSuccess bool) {
	ticker := time.NewTicker(50 * time.Millisecond)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
		if getMMDSOpts(ctx, base) && stopOnSuccess {
			fmt.Fprintf(os.Stderr, "fake-envd: mmds: got opts from %s\n", base)
			return
		}
	}
}

// getMMDSOpts does one token + metadata round trip and reports whether GET / gave 200.
func getMMDSOpts(ctx context.Context, base string) bool {
	// A zero http.Transport has no Proxy func, so proxy env vars are ignored:
	// the only peer is base.
	client := &http.Client{
		Transport: &http.Transport{DisableKeepAlives: true},
		Timeout:   10 * time.Second,
	}

	tokenReq, err := http.NewRequestWithContext(ctx, http.MethodPut, base+"/latest/api/token", nil)
	if err != nil {
		return false
	}
	tokenReq.Header.Set("X-metadata-token-ttl-seconds", "60")
	resp, err := client.Do(tokenReq)
	if err != nil {
		return false
	}
	token, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return false
	}

	getReq, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/", nil)
	if err != nil {
		return false
	}
	getReq.Header.Set("X-metadata-token", string(token))
	getReq.Header.Set("Accept", "application/json")
	resp, err = client.Do(getReq)
	if err != nil {
		return false
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}
