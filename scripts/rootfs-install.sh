#!/usr/bin/env bash
# Installs the probe into a VM root filesystem (a directory, e.g. a mounted rootfs image):
#   /opt/vsockdiag/{node, vsockdiag-probe.js, vsockdiag-probe.bundle.js, vsockdiag.node}
#   /opt/vsockdiag/vsockdiag-probe.bundle.cache: V8's code cache for that Node (x64 only)
# and the service files from deploy/guest/ for the image's init:
#   systemd: /etc/systemd/system/vsockdiag-probe.service (enabled) and the envd drop-in
#            /etc/systemd/system/envd.service.d/vsockdiag.conf
#   runit:   /etc/sv/vsockdiag-probe/{run,log/run}, linked into /etc/service if the image has it
#   openrc:  /etc/init.d/vsockdiag-probe, in the default runlevel
# The probe brings its own Node binary, so it never depends on the template's. That Node
# must need only the C and C++ runtime, and the image must have them, new enough: checked
# before anything is installed (scripts/rootfs-tool.mjs check-libs).
# Usage: scripts/rootfs-install.sh ROOTFS [x64|arm64] [systemd|runit|openrc]
#   NODE_BIN: the Node to install (default: the node on PATH; required for arm64)
set -euo pipefail

usage='usage: rootfs-install.sh ROOTFS [x64|arm64] [systemd|runit|openrc]'
rootfs=${1:?$usage}
arch=${2:-x64}
init=${3:-systemd}
here=$(cd "$(dirname "$0")/.." && pwd)
dist=$here/guest-probe/dist
deploy=$here/deploy/guest
tool=$here/scripts/rootfs-tool.mjs

case $arch in
  x64) addon=$dist/vsockdiag.node; node_bin=${NODE_BIN:-$(command -v node)}; strip_tool=x86_64-linux-gnu-strip; host_arch=x86_64 ;;
  arm64) addon=$here/guest-probe/native/build-arm64/vsockdiag.node; node_bin=${NODE_BIN:?set NODE_BIN to an arm64 node binary}; strip_tool=aarch64-linux-gnu-strip; host_arch=aarch64 ;;
  *) echo "unknown arch $arch (x64 or arm64)" >&2; exit 2 ;;
esac
case $init in
  systemd|runit|openrc) ;;
  *) echo "unknown init $init (systemd, runit or openrc)" >&2; exit 2 ;;
esac
[ -d "$rootfs" ] || { echo "ROOTFS $rootfs is not a directory" >&2; exit 2; }
rootfs=$(cd "$rootfs" && pwd)
for f in "$dist/vsockdiag-probe.js" "$dist/vsockdiag-probe.bundle.js" "$addon" "$node_bin"; do
  [ -f "$f" ] || { echo "missing $f (run make build, or make cross-arm64 for arm64)" >&2; exit 1; }
done
node_bin=$(readlink -f "$node_bin")

# Before anything is written: will this Node and addon run in that image?
node "$tool" check-libs "$rootfs" "$arch" "$node_bin" "$addon"

# Where a path of the image is here, its symlinks followed inside the image (an absolute
# link must not lead onto this machine's own /etc).
at() { node "$tool" resolve "$rootfs" "$1"; }

# The same architecture's strip: this machine's own for its architecture, else a cross one.
strip_cmd=
if [ "$(uname -m)" = "$host_arch" ] && command -v strip >/dev/null; then strip_cmd=strip
elif command -v "$strip_tool" >/dev/null; then strip_cmd=$strip_tool
fi
# Installs $1 as $2 with mode $3, stripped of symbols and debug data when strip can (the
# dynamic symbols the addon links against stay). Says so when it cannot.
install_stripped() {
  install -m "$3" "$1" "$2"
  if [ -z "$strip_cmd" ]; then
    echo "rootfs-install: no strip for $arch here (install binutils-${strip_tool%-strip}): $(basename "$2") left as it is"
  elif ! "$strip_cmd" "$4" "$2" 2>/dev/null; then
    install -m "$3" "$1" "$2"
    echo "rootfs-install: $strip_cmd could not strip $(basename "$2"): installed as it is"
  fi
}

dest=$(at /opt/vsockdiag)
install -d "$dest"
install_stripped "$node_bin" "$dest/node" 0755 --strip-all
install -m 0755 "$dist/vsockdiag-probe.js" "$dest/vsockdiag-probe.js"
install -m 0644 "$dist/vsockdiag-probe.bundle.js" "$dest/vsockdiag-probe.bundle.js"
install_stripped "$addon" "$dest/vsockdiag.node" 0644 --strip-unneeded
# The code cache speeds up the probe's start on every boot, and fits only the Node that made
# it: make it here with the installed Node. An arm64 Node cannot run here, so arm64 images
# go without (the probe then compiles its bundle at start, a few ms slower).
rm -f "$dest/vsockdiag-probe.bundle.cache"
if [ "$arch" = x64 ] && [ "$(uname -m)" = x86_64 ]; then
  node "$here/guest-probe/code-cache.mjs" "$dest" "$dest/node"
fi

case $init in
  systemd)
    units=$(at /etc/systemd/system)
    install -d "$units/envd.service.d" "$units/multi-user.target.wants"
    install -m 0644 "$deploy/systemd/vsockdiag-probe.service" "$units/vsockdiag-probe.service"
    install -m 0644 "$deploy/systemd/envd.service.d/vsockdiag.conf" "$units/envd.service.d/vsockdiag.conf"
    ln -sfn ../vsockdiag-probe.service "$units/multi-user.target.wants/vsockdiag-probe.service"
    what="vsockdiag-probe.service (enabled), envd.service.d/vsockdiag.conf"
    ;;
  runit)
    sv=$(at /etc/sv/vsockdiag-probe)
    install -d "$sv/log"
    install -m 0755 "$deploy/runit/vsockdiag-probe/run" "$sv/run"
    install -m 0755 "$deploy/runit/vsockdiag-probe/log/run" "$sv/log/run"
    what="/etc/sv/vsockdiag-probe"
    if [ -d "$(at /etc/service)" ]; then
      ln -sfn /etc/sv/vsockdiag-probe "$(at /etc/service)/vsockdiag-probe"
      what="$what, linked into /etc/service"
    else
      what="$what (no /etc/service in the image: start it with 'runsv /etc/sv/vsockdiag-probe' before envd's runsv)"
    fi
    what="$what; envd's run needs NOTIFY_SOCKET and a wait for the socket: see deploy/guest/runit/envd-run.sh"
    ;;
  openrc)
    initd=$(at /etc/init.d)
    install -d "$initd" "$(at /etc/runlevels/default)"
    install -m 0755 "$deploy/openrc/vsockdiag-probe" "$initd/vsockdiag-probe"
    ln -sfn /etc/init.d/vsockdiag-probe "$(at /etc/runlevels/default)/vsockdiag-probe"
    what="/etc/init.d/vsockdiag-probe (default runlevel); give envd --env NOTIFY_SOCKET=/run/vsockdiag/notify.sock in its supervise_daemon_args"
    ;;
esac

size() { awk -v b="$1" 'BEGIN { if (b >= 1048576) printf "%.1f MiB", b / 1048576; else printf "%d KiB", (b + 1023) / 1024 }'; }
total=0
sizes=
for f in "$dest"/*; do
  s=$(stat -c %s "$f")
  total=$((total + s))
  sizes="$sizes, $(basename "$f") $(size "$s")"
  [ "$(basename "$f")" = node ] && sizes="$sizes (from $(size "$(stat -c %s "$node_bin")"))"
done
echo "installed the probe into $rootfs (arch $arch, init $init):"
echo "  /opt/vsockdiag: $(size "$total"): ${sizes#, }"
echo "  $what"
