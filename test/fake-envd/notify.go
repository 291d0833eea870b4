package main

import (
	"fmt"
	"net"
	"os"
)

// notifier sends sd_notify(3)-style datagrams to $NOTIFY_SOCKET.
// A zero notifier (no socket, or -no-notify) sends nothing.
type notifier struct {
	socket string // as given in NOTIFY_SOCKET; a leading '@' is the Linux abstract namespace
	warned bool
}

func newNotifier(disabled bool) *notifier {
	if disabled {
		return &notifier{}
	}
	return &notifier{socket: os.Getenv("NOTIFY_SOCKET")}
}

// send writes one datagram. Like sd_notify it opens a fresh socket each time.
// Failures are reported once on stderr and otherwise ignored: envd would keep starting.
func (n *notifier) send(msg string) {
	if n.socket == "" {
		return
	}
	// Go's net package maps a leading '@' to a NUL byte, i.e. the abstract namespace.
	conn, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: n.socket, Net: "unixgram"})
	if err == nil {
		_, err = conn.Write([]byte(msg))
		conn.Close()
	}
	if err != nil && !n.warned {
		n.warned = true
		fmt.Fprintf(os.Stderr, "fake-envd: NOTIFY_SOCKET %q: %v (further notify errors suppressed)\n", n.socket, err)
	}
}
