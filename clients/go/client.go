// Package vsockdiag is a client for the vsockdiag collector's HTTP API (docs/openapi.json):
// register a sandbox before its VM boots, wait for it to be ready with the readiness
// long-poll instead of retrying the guest, ask why it is not, and take a dump when it is
// stuck. Standard library only; Go 1.19 or newer.
package vsockdiag

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Client talks to one collector. The zero value is not usable: set BaseURL.
type Client struct {
	// BaseURL is the collector's address, e.g. "http://127.0.0.1:7070".
	BaseURL string
	// ReadinessURL is the collector's readiness port (its --readiness-http), e.g.
	// "http://127.0.0.1:7071": Readiness and WaitReady ask it, answered by a thread that
	// never waits behind the collector's ingest. Empty: they ask BaseURL.
	ReadinessURL string
	// Token is the collector's --token, sent as a bearer token; empty when it has none.
	Token string
	// HTTPClient is the client requests go through; nil means http.DefaultClient. Its own
	// Timeout, if set, must exceed the long-poll (see WaitReady); contexts are the better bound.
	HTTPClient *http.Client
}

// New returns a client for the collector at baseURL.
func New(baseURL, token string) *Client {
	return &Client{BaseURL: baseURL, Token: token}
}

// APIError is an answer the collector refused with: its HTTP status and the stable code
// of docs/codes.md ("NOT_FOUND", "BAD_PATH", "PROBE_UNREACHABLE", …).
type APIError struct {
	Status  int
	Code    string
	Message string
}

func (e *APIError) Error() string {
	return fmt.Sprintf("vsockdiag: %d %s: %s", e.Status, e.Code, e.Message)
}

// IsCode reports whether err is an APIError with the given code.
func IsCode(err error, code string) bool {
	var e *APIError
	return errors.As(err, &e) && e.Code == code
}

// Register makes the collector listen on <udsPath>_<vsock-port> for the sandbox's probe
// (call it before the VM boots). created is false when the id was already registered
// (the same path, or a new one the listener moved to).
func (c *Client) Register(ctx context.Context, id, udsPath string) (s *SandboxSummary, created bool, err error) {
	s = new(SandboxSummary)
	status, err := c.do(ctx, http.MethodPut, sandboxPath(id), map[string]string{"udsPath": udsPath}, s, http.StatusOK, http.StatusCreated)
	if err != nil {
		return nil, false, err
	}
	return s, status == http.StatusCreated, nil
}

// Unregister stops listening for the sandbox and forgets it (its history goes too).
func (c *Client) Unregister(ctx context.Context, id string) error {
	_, err := c.do(ctx, http.MethodDelete, sandboxPath(id), nil, nil, http.StatusNoContent)
	return err
}

// Status returns the sandbox in detail: state, reason, conditions and what the probe saw.
func (c *Client) Status(ctx context.Context, id string) (*SandboxDetail, error) {
	d := new(SandboxDetail)
	if _, err := c.do(ctx, http.MethodGet, sandboxPath(id), nil, d, http.StatusOK); err != nil {
		return nil, err
	}
	return d, nil
}

// DumpOptions says what to dump. Mode is "threads" (the default: every thread's kernel
// stack, harmless), "goroutines" (a Go target's goroutines) or "native".
type DumpOptions struct {
	Mode string `json:"mode,omitempty"`
	// Destructive lets a goroutines dump fall back to SIGQUIT, which kills the target.
	Destructive bool `json:"destructive,omitempty"`
}

// Dump takes a dump now and returns when it is stored (it can take seconds).
func (c *Client) Dump(ctx context.Context, id string, opts DumpOptions) (*DumpBrief, error) {
	d := new(DumpBrief)
	if _, err := c.do(ctx, http.MethodPost, sandboxPath(id)+"/dumps", opts, d, http.StatusCreated); err != nil {
		return nil, err
	}
	return d, nil
}

// NotReadyError is WaitReady's answer when the sandbox is not ready: either it settled in
// a state that will not become ready by itself (stuck, exited: Err is nil), or ctx ended
// first (Err is ctx.Err()). Readiness is the collector's last word, with its reason.
type NotReadyError struct {
	Readiness
	Err error
}

func (e *NotReadyError) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("vsockdiag: sandbox not ready (%s: %s): %v", e.State, e.Reason, e.Err)
	}
	return fmt.Sprintf("vsockdiag: sandbox %s: %s", e.State, e.Reason)
}

func (e *NotReadyError) Unwrap() error { return e.Err }

// Settled reports whether the state will not turn ready by itself soon (stuck, exited):
// act on it (dump, retry the sandbox) rather than wait longer.
func (e *NotReadyError) Settled() bool { return e.Err == nil }

// The collector holds one readiness request at most this long (MAX_READINESS_WAIT_MS).
const maxWait = 120 * time.Second

// pollWait is how long one request is held when ctx has no deadline.
const pollWait = 30 * time.Second

// A long-poll is asked to end this much before ctx's deadline (a tenth of the time left,
// within these bounds), so the collector's answer, with its reason, arrives before the
// context cuts the request off.
const (
	minMargin = 50 * time.Millisecond
	maxMargin = time.Second
)

// pollFor is how long to hold one readiness request: up to ctx's deadline less the margin.
func pollFor(ctx context.Context) time.Duration {
	deadline, ok := ctx.Deadline()
	if !ok {
		return pollWait
	}
	left := time.Until(deadline)
	margin := left / 10
	if margin < minMargin {
		margin = minMargin
	}
	if margin > maxMargin {
		margin = maxMargin
	}
	wait := left - margin
	if wait > maxWait {
		wait = maxWait
	}
	if wait < 0 {
		wait = 0
	}
	return wait
}

// WaitReady waits until the sandbox is ready, using the collector's long-poll: each
// request is held until the sandbox settles (ready, stuck, exited) or its wait runs out,
// so no guest is polled and no answer is missed. It returns the readiness when ready; a
// *NotReadyError when the sandbox settled not ready or ctx ended (errors.Is(err,
// context.DeadlineExceeded) tells the two apart); an *APIError (NOT_FOUND: not registered)
// or a transport error otherwise.
func (c *Client) WaitReady(ctx context.Context, id string) (*Readiness, error) {
	var last *Readiness
	for {
		wait := pollFor(ctx)
		r, err := c.Readiness(ctx, id, wait)
		if err != nil {
			if ctx.Err() == nil {
				return last, err
			}
			// Cut off by ctx: not ready by the deadline (State is empty if no answer came at all).
			nr := &NotReadyError{Err: ctx.Err()}
			if last != nil {
				nr.Readiness = *last
			}
			return last, nr
		}
		last = r
		if r.Ready {
			return r, nil
		}
		if r.State == "stuck" || r.State == "exited" {
			return r, &NotReadyError{Readiness: *r}
		}
		if ctx.Err() != nil || wait == 0 {
			return r, &NotReadyError{Readiness: *r, Err: context.DeadlineExceeded}
		}
	}
}

// Readiness asks once, holding the request up to wait (0: answer at once) for the sandbox
// to settle. Not ready is an answer (Ready false, with the state and reason), not an error.
func (c *Client) Readiness(ctx context.Context, id string, wait time.Duration) (*Readiness, error) {
	r := new(Readiness)
	p := fmt.Sprintf("%s/readiness?wait=%d", sandboxPath(id), wait.Milliseconds())
	base := c.ReadinessURL
	if base == "" {
		base = c.BaseURL
	}
	// 503 is an answer here (not ready, and why), not a failure.
	if _, err := c.doAt(ctx, base, http.MethodGet, p, nil, r, http.StatusOK, http.StatusServiceUnavailable); err != nil {
		return nil, err
	}
	return r, nil
}

func sandboxPath(id string) string {
	return "/v1/sandboxes/" + url.PathEscape(id)
}

// do sends one request to BaseURL and decodes the answer into out when its status is one
// of ok; any other status is an *APIError.
func (c *Client) do(ctx context.Context, method, path string, body, out interface{}, ok ...int) (int, error) {
	return c.doAt(ctx, c.BaseURL, method, path, body, out, ok...)
}

// doAt is do against another base URL (the readiness port).
func (c *Client) doAt(ctx context.Context, base, method, path string, body, out interface{}, ok ...int) (int, error) {
	var reader io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, err
		}
		reader = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimRight(base, "/")+path, reader)
	if err != nil {
		return 0, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	hc := c.HTTPClient
	if hc == nil {
		hc = http.DefaultClient
	}
	res, err := hc.Do(req)
	if err != nil {
		return 0, err
	}
	defer res.Body.Close()
	data, err := io.ReadAll(io.LimitReader(res.Body, 16<<20))
	if err != nil {
		return res.StatusCode, err
	}
	for _, s := range ok {
		if res.StatusCode != s {
			continue
		}
		if out == nil || len(data) == 0 {
			return s, nil
		}
		if err := json.Unmarshal(data, out); err != nil {
			return s, fmt.Errorf("vsockdiag: %s %s: decoding the answer: %w", method, path, err)
		}
		return s, nil
	}
	var e errorBody
	if json.Unmarshal(data, &e) != nil || e.Error.Code == "" {
		return res.StatusCode, &APIError{Status: res.StatusCode, Code: "", Message: strings.TrimSpace(string(data))}
	}
	return res.StatusCode, &APIError{Status: res.StatusCode, Code: e.Error.Code, Message: e.Error.Message}
}
