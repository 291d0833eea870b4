#!/bin/sh
# An envd service `run` for runsv in AgentENV's shape (tools-image/pivot-init: stderr to
# /var/log/agentenv/envd.stderr.log), with the two additions the vsockdiag probe needs,
# marked below. runit has no drop-ins: put them into your envd's own run script.
mkdir -p /var/log/agentenv
exec 2>>/var/log/agentenv/envd.stderr.log
# vsockdiag 1/2: wait (at most 5 s) until the probe's notify socket is bound, so envd's first
# phase markers are not sent into the void (runsv starts every service at once).
i=0; while [ ! -S /run/vsockdiag/notify.sock ] && [ $i -lt 500 ]; do sleep 0.01; i=$((i+1)); done
# vsockdiag 2/2: where envd reports PHASE=, STATUS= and READY=1.
export NOTIFY_SOCKET=/run/vsockdiag/notify.sock
export GOTRACEBACK=all
exec /usr/bin/envd
