package main

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"time"
)

// A reader that has stopped reading (frozen, stuck) lets its queue fill,
// net.unix.max_dgram_qlen datagrams (often 10), and then a plain write blocks forever,
// and the start-up with it. So every write has a deadline: long enough for a reader that
// is merely busy (a loaded machine), short enough not to hold the start-up for long.
const notifyTimeout = 2 * time.Second

// Once a write timed out the reader is not keeping up: later phases go only if they fit
// at once, so a dead reader costs the start-up one timeout, not one per phase. READY=1
// always gets the full deadline: it is the one message readiness waits for.
const notifyBehindTimeout = time.Millisecond

// notifier sends sd_notify(3)-style datagrams to $NOTIFY_SOCKET.
// A zero notifier (no socket, or -no-notify) sends nothing.
type notifier struct {
	socket string // as given in NOTIFY_SOCKET; a leading '@' is the Linux abstract namespace
	behind bool   // a write timed out
	warned bool
}

func newNotifier(disabled bool) *notifier {
	socket := os.Getenv("NOTIFY_SOCKET")
	// The socket is for this process alone: a child that inherited it could report
	// phases and READY=1 in its name.
	os.Unsetenv("NOTIFY_SOCKET")
	if disabled {
		return &notifier{}
	}
	return &notifier{socket: socket}
}

// send writes one datagram. Like sd_notify it opens a fresh socket each time.
// Failures are reported once on stderr and otherwise ignored: envd would keep starting.
func (n *notifier) send(msg string) {
	if n.socket == "" {
		return
	}
	timeout := notifyTimeout
	if n.behind && !strings.Contains(msg, "READY=1") {
		timeout = notifyBehindTimeout
	}
	// Go's net package maps a leading '@' to a NUL byte, i.e. the abstract namespace.
	conn, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: n.socket, Net: "unixgram"})
	if err == nil {
		conn.SetWriteDeadline(time.Now().Add(timeout))
		_, err = conn.Write([]byte(msg))
		conn.Close()
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		n.behind = true
	}
	if err != nil && !n.warned {
		n.warned = true
		fmt.Fprintf(os.Stderr, "fake-envd: NOTIFY_SOCKET %q: %v (further notify errors suppressed)\n", n.socket, err)
	}
}
