package vsockdiag

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"
)

// Against a real collector, started by test/integration/go-client.test.ts, which also plays
// the sandbox's probe: it connects once the sandbox is registered, reports envd alive but
// not listening (503 with a reason), and starts listening when it is asked for a dump.
func TestAgainstACollector(t *testing.T) {
	base := os.Getenv("VSOCKDIAG_TEST_COLLECTOR")
	if base == "" {
		t.Skip("VSOCKDIAG_TEST_COLLECTOR is not set: run through test/integration/go-client.test.ts")
	}
	id, uds, token := os.Getenv("VSOCKDIAG_TEST_SANDBOX"), os.Getenv("VSOCKDIAG_TEST_UDS"), os.Getenv("VSOCKDIAG_TEST_TOKEN")
	c := New(base, token)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	if _, _, err := New(base, "wrong").Register(ctx, id, uds); !IsCode(err, "UNAUTHORIZED") {
		t.Fatalf("a wrong token: %v", err)
	}
	s, created, err := c.Register(ctx, id, uds)
	if err != nil || !created || s.ID != id || s.State != "registered" {
		t.Fatalf("Register: %+v created=%v err=%v", s, created, err)
	}
	if _, created, err := c.Register(ctx, id, uds); err != nil || created {
		t.Fatalf("Register again: created=%v err=%v", created, err)
	}
	if _, _, err := c.Register(ctx, "other", "relative/vm.sock"); !IsCode(err, "BAD_PATH") {
		t.Fatalf("a relative udsPath: %v", err)
	}

	// The probe connects (the test's fake sandbox dials the socket Register opened).
	var d *SandboxDetail
	for {
		d, err = c.Status(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if d.Connected && d.State == "starting" {
			if d.UDSPath != uds || d.Reason == "" {
				t.Fatalf("Status: %+v", d)
			}
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the fake probe never connected: %v; last %+v", ctx.Err(), d.SandboxSummary)
		case <-time.After(50 * time.Millisecond):
		}
	}

	// Not ready yet: WaitReady long-polls, and gives up at the context's deadline with the
	// collector's reason (a 503 answer, not a failure).
	short, cancelShort := context.WithTimeout(ctx, 3*time.Second)
	began := time.Now()
	r, err := c.WaitReady(short, id)
	cancelShort()
	var notReady *NotReadyError
	if !errors.As(err, &notReady) || !errors.Is(err, context.DeadlineExceeded) || notReady.Settled() {
		t.Fatalf("WaitReady before ready: %+v %v", r, err)
	}
	if notReady.State != "starting" || notReady.Ready || notReady.Reason == "" {
		t.Fatalf("WaitReady before ready: %+v", notReady.Readiness)
	}
	// It waited on the collector (one held request), not returning at once or polling past the deadline.
	if waited := time.Since(began); waited < 2*time.Second || waited > 30*time.Second {
		t.Fatalf("WaitReady returned after %v for a 3 s deadline", waited)
	}
	if r, err := c.Readiness(ctx, id, 0); err != nil || r.Ready || r.Reason == "" {
		t.Fatalf("Readiness: %+v %v", r, err)
	}

	// A dump: the fake probe answers it, then starts listening.
	dump, err := c.Dump(ctx, id, DumpOptions{Mode: "threads"})
	if err != nil || dump.Mode != "threads" || !dump.Complete || dump.SandboxID != id || dump.Bytes == 0 {
		t.Fatalf("Dump: %+v %v", dump, err)
	}
	if _, err := c.Dump(ctx, id, DumpOptions{Mode: "everything"}); !IsCode(err, "BAD_REQUEST") {
		t.Fatalf("a bad dump mode: %v", err)
	}

	r, err = c.WaitReady(ctx, id)
	if err != nil || !r.Ready || r.State != "ready" {
		t.Fatalf("WaitReady: %+v %v", r, err)
	}
	// The readiness port gives the same answer; BaseURL is not asked (it points nowhere here).
	rc := &Client{BaseURL: "http://127.0.0.1:1", ReadinessURL: os.Getenv("VSOCKDIAG_TEST_READINESS"), Token: token}
	if rr, err := rc.WaitReady(ctx, id); err != nil || !rr.Ready || rr.State != "ready" || rr.Session != r.Session {
		t.Fatalf("WaitReady on the readiness port: %+v %v (the API: %+v)", rr, err, r)
	}
	if st, err := c.Status(ctx, id); err != nil || st.State != "ready" {
		t.Fatalf("Status when ready: %+v %v", st, err)
	}

	if err := c.Unregister(ctx, id); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Status(ctx, id); !IsCode(err, "NOT_FOUND") {
		t.Fatalf("Status after Unregister: %v", err)
	}
	if _, err := c.WaitReady(ctx, id); !IsCode(err, "NOT_FOUND") {
		t.Fatalf("WaitReady after Unregister: %v", err)
	}
	if err := c.Unregister(ctx, id); !IsCode(err, "NOT_FOUND") {
		t.Fatalf("Unregister twice: %v", err)
	}
}
