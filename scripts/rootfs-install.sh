#!/usr/bin/env bash
# Installs the probe into a VM root filesystem (a directory, e.g. a mounted rootfs image):
#   $ROOTFS/opt/vsockdiag/{node, vsockdiag-probe.js, vsockdiag-probe.bundle.js, vsockdiag.node}
#   $ROOTFS/opt/vsockdiag/vsockdiag-probe.bundle.cache: V8's code cache for that Node (x64 only)
#   $ROOTFS/etc/systemd/system/vsockdiag-probe.service (+ a drop-in giving envd NOTIFY_SOCKET)
# The probe brings its own Node binary, so it never depends on the template's.
# Usage: scripts/rootfs-install.sh ROOTFS [ARCH]   (ARCH x64 (default) or arm64)
set -euo pipefail

rootfs=${1:?usage: rootfs-install.sh ROOTFS [x64|arm64]}
arch=${2:-x64}
here=$(cd "$(dirname "$0")/.." && pwd)
dist=$here/guest-probe/dist
case $arch in
  x64) addon=$dist/vsockdiag.node; node_bin=${NODE_BIN:-$(command -v node)} ;;
  arm64) addon=$here/guest-probe/native/build-arm64/vsockdiag.node; node_bin=${NODE_BIN:?set NODE_BIN to an arm64 node binary} ;;
  *) echo "unknown arch $arch (x64 or arm64)" >&2; exit 2 ;;
esac
for f in "$dist/vsockdiag-probe.js" "$dist/vsockdiag-probe.bundle.js" "$addon" "$node_bin"; do
  [ -f "$f" ] || { echo "missing $f (run make build, or make cross-arm64 for arm64)" >&2; exit 1; }
done

dest=$rootfs/opt/vsockdiag
install -d "$dest" "$rootfs/etc/systemd/system/envd.service.d"
install -m 0755 "$node_bin" "$dest/node"
install -m 0755 "$dist/vsockdiag-probe.js" "$dest/vsockdiag-probe.js"
install -m 0644 "$dist/vsockdiag-probe.bundle.js" "$dest/vsockdiag-probe.bundle.js"
install -m 0644 "$addon" "$dest/vsockdiag.node"
# The code cache speeds up the probe's start on every boot, and fits only the Node that made
# it: make it here with the installed Node. An arm64 Node cannot run here, so arm64 images
# go without (the probe then compiles its bundle at start, a few ms slower).
rm -f "$dest/vsockdiag-probe.bundle.cache"
if [ "$arch" = x64 ]; then
  node "$here/guest-probe/code-cache.mjs" "$dest" "$dest/node"
fi

cat > "$rootfs/etc/systemd/system/vsockdiag-probe.service" <<'UNIT'
[Unit]
Description=vsockdiag probe: watches envd from outside and reports over vsock
DefaultDependencies=no
Before=envd.service

[Service]
ExecStart=/opt/vsockdiag/node /opt/vsockdiag/vsockdiag-probe.js --notify-socket /run/vsockdiag/notify.sock
# Units ordered after this one start only once ExecStartPost is done: wait (at most 5 s) for
# the notify socket, so envd's first phase markers are not sent into the void.
ExecStartPost=/bin/sh -c 'i=0; while [ ! -S /run/vsockdiag/notify.sock ] && [ $i -lt 500 ]; do sleep 0.01; i=$((i+1)); done'
Restart=always
RestartSec=1

[Install]
WantedBy=multi-user.target
UNIT

cat > "$rootfs/etc/systemd/system/envd.service.d/vsockdiag.conf" <<'DROPIN'
[Unit]
After=vsockdiag-probe.service

[Service]
Environment=NOTIFY_SOCKET=/run/vsockdiag/notify.sock
# A SIGQUIT goroutine dump is thousands of lines at once: journald's default rate limit would
# drop most of it before the probe (following the journal) can read it.
LogRateLimitIntervalSec=0
DROPIN

install -d "$rootfs/etc/systemd/system/multi-user.target.wants"
ln -sf ../vsockdiag-probe.service "$rootfs/etc/systemd/system/multi-user.target.wants/vsockdiag-probe.service"
echo "installed the probe into $rootfs (arch $arch): /opt/vsockdiag, vsockdiag-probe.service, envd drop-in"
