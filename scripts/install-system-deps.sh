#!/usr/bin/env bash
# Installs what a fresh machine (Node 20, npm, python3, make, g++) lacks: pnpm, and the
# Debian packages the tests need (golang-go builds the fake envd; iproute2 and util-linux
# make the simulated sandboxes' namespaces; gcc-aarch64-linux-gnu proves the addon
# cross-compiles for arm64; qemu-user-static runs the arm64 Go binaries the Go reader's live
# tests read; chromium runs the dashboard's browser tests; mmdebstrap builds the Debian image
# the boot tests boot with systemd-container's systemd-nspawn; prometheus brings promtool,
# which lints /metrics and the shipped alert rules). Idempotent.
set -euo pipefail

PNPM_VERSION=12.4.2
if ! command -v pnpm >/dev/null || [ "$(pnpm --version 2>/dev/null)" != "$PNPM_VERSION" ]; then
  echo "installing pnpm $PNPM_VERSION"
  npm install -g "pnpm@$PNPM_VERSION" >/dev/null
fi

need=()
command -v go >/dev/null || need+=(golang-go)
command -v unshare >/dev/null || need+=(util-linux)
command -v ip >/dev/null || need+=(iproute2)
command -v aarch64-linux-gnu-gcc >/dev/null || need+=(gcc-aarch64-linux-gnu)
command -v qemu-aarch64-static >/dev/null || need+=(qemu-user-static)
command -v chromium >/dev/null || need+=(chromium)
command -v mmdebstrap >/dev/null || need+=(mmdebstrap)
command -v systemd-nspawn >/dev/null || need+=(systemd-container)
command -v promtool >/dev/null || need+=(prometheus)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "missing ${need[*]} and not root: install them with apt-get, or run as root" >&2
    exit 1
  fi
  echo "installing Debian packages: ${need[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi
