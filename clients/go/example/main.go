// An orchestrator's start of a sandbox without the /init retry loop.
//
// E2B's orchestrator POSTs envd's /init every 5 ms for up to 10 s, learning nothing from
// the failures: "connection refused" 2,000 times says neither why envd is late nor whether
// it ever will be ready. With the collector, the orchestrator registers the sandbox before
// the VM boots, asks the collector once (a long-poll, answered the moment envd listens or
// is found stuck or gone), and POSTs /init once, when it will be answered.
//
//	go run ./example -collector http://127.0.0.1:7070 -token "$TOKEN" \
//	    -id sbx-1 -uds /run/firecracker/sbx-1/v.sock -envd http://10.11.0.2:49983
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net/http"
	"os"
	"time"

	vsockdiag "vsockdiag/clients/go"
)

func main() {
	collector := flag.String("collector", "http://127.0.0.1:7070", "the collector's API")
	token := flag.String("token", os.Getenv("VSOCKDIAG_TOKEN"), "the collector's --token")
	id := flag.String("id", "", "the sandbox id")
	uds := flag.String("uds", "", "Firecracker's vsock uds_path for the sandbox")
	envd := flag.String("envd", "", "envd's address in the VM, e.g. http://10.11.0.2:49983")
	budget := flag.Duration("timeout", 10*time.Second, "how long the sandbox may take to be ready")
	flag.Parse()
	if *id == "" || *uds == "" || *envd == "" {
		flag.Usage()
		os.Exit(2)
	}
	c := vsockdiag.New(*collector, *token)
	ctx := context.Background()

	// 1. Before the VM boots: the collector listens on <uds>_52000 for the probe.
	if _, _, err := c.Register(ctx, *id, *uds); err != nil {
		// The collector is a diagnostic, not a dependency: without it, start as before.
		log.Printf("collector unavailable (%v): falling back to the /init retry loop", err)
		os.Exit(exit(retryInit(ctx, *envd, *budget)))
	}

	// 2. Boot the VM here (Firecracker InstanceStart), then wait for envd, once.
	wait, cancel := context.WithTimeout(ctx, *budget)
	defer cancel()
	r, err := c.WaitReady(wait, *id)
	var notReady *vsockdiag.NotReadyError
	var apiErr *vsockdiag.APIError
	switch {
	case err == nil:
		// Ready: envd listens on its port (and sent READY=1 if it reports phases). /init is
		// answered now; a failure of it is envd's answer, not a race with its start-up.
		log.Printf("%s ready (generation %d): %s", *id, r.Generation, r.Reason)
		os.Exit(exit(postInit(ctx, *envd)))

	case errors.As(err, &notReady) && notReady.State == "stuck":
		// Alive but not getting ready (no new phase, its listener gone, an MMDS storm, …):
		// the reason says where. Keep the evidence (a goroutine dump, without SIGQUIT: envd
		// survives), then give the sandbox up rather than wait out the budget.
		log.Printf("%s stuck: %s", *id, notReady.Reason)
		if d, err := c.Dump(ctx, *id, vsockdiag.DumpOptions{Mode: "goroutines"}); err == nil && d.Top != nil {
			log.Printf("dump %d: %d goroutines blocked in %s", d.ID, d.Top.Count, d.Top.BlockedIn)
		}
		os.Exit(1)

	case errors.As(err, &notReady) && notReady.State == "exited":
		// envd is gone (the reason has its exit status or signal): retrying /init cannot help.
		log.Printf("%s: envd exited: %s", *id, notReady.Reason)
		os.Exit(1)

	case errors.As(err, &notReady) && errors.Is(err, context.DeadlineExceeded):
		// Out of time while still on its way. "registered" or "booting": the probe never
		// said hello or envd never appeared (a VM that did not boot, an image without the
		// probe); "starting": envd is alive and slow; "silent": the probe stopped talking.
		// The state and reason are what the old loop's 2,000 refusals never said.
		log.Printf("%s not ready in %v (%s): %s", *id, *budget, notReady.State, notReady.Reason)
		os.Exit(1)

	case errors.As(err, &apiErr) && apiErr.Code == "NOT_FOUND":
		// Unregistered meanwhile (another caller, or a collector restarted without its data).
		log.Printf("%s is not registered: %v", *id, err)
		os.Exit(1)

	default:
		// The collector went away mid-wait: fall back, for what is left of the budget.
		log.Printf("collector failed (%v): falling back to the /init retry loop", err)
		os.Exit(exit(retryInit(ctx, *envd, *budget)))
	}
}

// postInit sends envd's /init once (the orchestrator's real body goes here).
func postInit(ctx context.Context, envd string) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, envd+"/init", bytes.NewReader([]byte("{}")))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	if res.StatusCode >= 300 {
		return fmt.Errorf("POST /init: %s", res.Status)
	}
	return nil
}

// retryInit is the loop the collector replaces, kept for when the collector is not there.
func retryInit(ctx context.Context, envd string, budget time.Duration) error {
	deadline := time.Now().Add(budget)
	for {
		err := postInit(ctx, envd)
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func exit(err error) int {
	if err != nil {
		log.Print(err)
		return 1
	}
	return 0
}
