package vsockdiag

import "encoding/json"

// The API's JSON, as docs/openapi.json declares it (components/schemas). types_test.go
// checks every field here against the document, so the two cannot drift apart.

// Condition is a named fact about a sandbox that rides along with any state
// (socket-storm, thread-growth, not-accepting, …; docs/codes.md lists them).
type Condition struct {
	Name    string   `json:"name"`
	Detail  string   `json:"detail"`
	Subject *string  `json:"subject,omitempty"`
	Count   *float64 `json:"count,omitempty"`
}

// SandboxSummary is a sandbox in the list, and what a registration answers.
type SandboxSummary struct {
	ID     string `json:"id"`
	State  string `json:"state"`
	Reason string `json:"reason"`
	Since  string `json:"since"`
	// Generation is the life of the VM (a boot or a restore); Session the probe connection.
	Generation int         `json:"generation"`
	Session    int         `json:"session"`
	Connected  bool        `json:"connected"`
	LastPhase  *string     `json:"lastPhase"`
	Conditions []Condition `json:"conditions"`
}

// Readiness is the answer of GET /v1/sandboxes/{id}/readiness (200 when ready, 503 not).
type Readiness struct {
	Ready      bool   `json:"ready"`
	State      string `json:"state"`
	Reason     string `json:"reason"`
	Generation int    `json:"generation"`
	Session    int    `json:"session"`
}

// SandboxDetail is one sandbox in detail (GET /v1/sandboxes/{id}). What the probe reported
// of its target, listener, health, sockets and system is kept as raw JSON: its fields are
// the guest's (docs/openapi.json lists the known ones).
type SandboxDetail struct {
	SandboxSummary
	UDSPath    string `json:"udsPath"`
	SocketPath string `json:"socketPath"`
	Source     string `json:"source"`
	// GenerationInfo says why the current generation began (cause: boot, vmgenid, clock, …).
	GenerationInfo      *GenerationInfo   `json:"generationInfo"`
	PausedSince         *string           `json:"pausedSince"`
	ExpectNewGeneration bool              `json:"expectNewGeneration"`
	ConnectedAt         *string           `json:"connectedAt"`
	DisconnectedAt      *string           `json:"disconnectedAt"`
	Probe               json.RawMessage   `json:"probe"`
	Target              json.RawMessage   `json:"target"`
	Listener            json.RawMessage   `json:"listener"`
	Readiness           json.RawMessage   `json:"readiness"`
	Health              json.RawMessage   `json:"health"`
	Sockets             json.RawMessage   `json:"sockets"`
	System              json.RawMessage   `json:"system"`
	ClockSkewMs         *float64          `json:"clockSkewMs"`
	Kernel              []json.RawMessage `json:"kernel"`
	Threads             []json.RawMessage `json:"threads"`
	Phases              []json.RawMessage `json:"phases"`
	MorePhases          bool              `json:"morePhases"`
	Dumps               []json.RawMessage `json:"dumps"`
	Blocked             *Blocked          `json:"blocked"`
	Counters            json.RawMessage   `json:"counters"`
	// Limits is what the sandbox's budget did to its guest: throttles, cut-offs, refusals.
	Limits json.RawMessage `json:"limits"`
}

// GenerationInfo is why a sandbox's current generation (a life of its VM) began, and when.
type GenerationInfo struct {
	Generation int     `json:"generation"`
	Cause      string  `json:"cause"`
	Detail     string  `json:"detail"`
	Since      string  `json:"since"`
	FromSeq    float64 `json:"fromSeq"`
}

// Blocked is where the newest goroutine dump of the current target found it blocked.
type Blocked struct {
	PID    int    `json:"pid"`
	Text   string `json:"text"`
	DumpID int    `json:"dumpId"`
}

// DumpTop is the largest group of a dump: where most goroutines (or threads) wait.
type DumpTop struct {
	BlockedIn string `json:"blockedIn"`
	Count     int    `json:"count"`
}

// DumpBrief is a stored dump without its text: what POST …/dumps answers.
type DumpBrief struct {
	ID         int      `json:"id"`
	SandboxID  string   `json:"sandboxId"`
	Generation int      `json:"generation"`
	Mode       string   `json:"mode"`
	Source     string   `json:"source"`
	Trigger    string   `json:"trigger"`
	Complete   bool     `json:"complete"`
	Error      *string  `json:"error"`
	Note       *string  `json:"note"`
	PID        *int     `json:"pid"`
	PausedMs   *float64 `json:"pausedMs"`
	Bytes      int      `json:"bytes"`
	CreatedMs  int64    `json:"createdMs"`
	CreatedAt  string   `json:"createdAt"`
	Kind       string   `json:"kind"`
	Top        *DumpTop `json:"top"`
}

// errorBody is the shape of every API error (the Error schema).
type errorBody struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}
