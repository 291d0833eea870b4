# vsockdiag — the two commands that matter: `make demo` and `make test`.
# Everything installs itself on a machine with Node 20, npm, python3, make and g++.

SHELL := /bin/bash
# node-gyp cannot download Node headers here; the machine has them in /usr/include/node.
export npm_config_nodedir ?= /usr

NODE_GYP := node guest-probe/node_modules/node-gyp/bin/node-gyp.js

.PHONY: install build test demo bench clean typecheck lint addon rootfs-install cross-arm64 dist reliability

install: node_modules/.modules.yaml

node_modules/.modules.yaml: package.json pnpm-lock.yaml pnpm-workspace.yaml */package.json scripts/install-system-deps.sh
	bash scripts/install-system-deps.sh
	pnpm install --frozen-lockfile
	@touch $@

addon: install
	cd guest-probe/native && npm_config_nodedir=$(npm_config_nodedir) node ../node_modules/node-gyp/bin/node-gyp.js rebuild --silent

typecheck: install
	pnpm exec tsc -p tsconfig.json --noEmit

# Biome (biome.jsonc): lint rules and the format check, no writes; `pnpm format` rewrites.
lint: install
	pnpm lint

build: install addon typecheck
	node guest-probe/build.mjs
	node host-collector/build.mjs
	pnpm --filter @vsockdiag/web-ui build
	@mkdir -p bin
	printf '#!/bin/sh\nexec node "$$(dirname "$$(readlink -f "$$0")")/../host-collector/dist/vsockdiag.js" "$$@"\n' > bin/vsockdiag
	printf '#!/bin/sh\nexec node "$$(dirname "$$(readlink -f "$$0")")/../guest-probe/dist/vsockdiag-probe.js" "$$@"\n' > bin/vsockdiag-probe
	chmod +x bin/vsockdiag bin/vsockdiag-probe

# vsockdiag-<version>.tgz: the collector, CLI, native SQLite module and dashboard in one package
# for `npm install -g ./vsockdiag-<version>.tgz`, no repo or registry needed (README, "Deploying
# the collector"). Built for this machine's platform and Node major.
dist: build
	node scripts/make-dist.mjs

# Every suite; the last line is the totals across all of them: "N passed, N failed, N skipped".
# The lint comes first: it takes seconds, and a lint error fails the run before the suites.
test: lint build
	node test/run-tests.mjs

demo: build
	node test/run-ts.mjs test/demo.ts

# The collector-scale runs hold 2 descriptors per session (20,000 asked for): the soft limit
# is raised to the hard one, for the collector and the clients the benchmark starts.
bench: build
	ulimit -n "$$(ulimit -Hn)" && node test/run-ts.mjs test/bench/run.ts

# Hostile input, load and access, in full (about 25 min): writes RELIABILITY.md and .json.
# The soak's 5,000 sessions need 10,000 descriptors: the soft limit is raised to the hard one.
reliability: build
	ulimit -n "$$(ulimit -Hn)" && node test/run-ts.mjs test/reliability/run.ts

# Install the probe into a VM root filesystem (README, "Installing the probe into a VM image"):
#   make rootfs-install ROOTFS=/mnt/rootfs [INIT=systemd|runit|openrc] [ARCH=x64|arm64 NODE_BIN=...]
rootfs-install: build
	bash scripts/rootfs-install.sh "$(ROOTFS)" $(or $(ARCH),x64) $(or $(INIT),systemd)

# The probe's addon for arm64 guests: the same C sources, cross-compiled with Debian's
# gcc-aarch64-linux-gnu against the (architecture-neutral) headers in /usr/include/node.
# N-API symbols are left undefined and resolved from the node binary at load time, as in
# node-gyp's own build (a -shared link allows undefined symbols unless -z defs is given).
ARM64_CC ?= aarch64-linux-gnu-gcc
NODE_INCLUDE ?= /usr/include/node
ARM64_OUT := guest-probe/native/build-arm64/vsockdiag.node

cross-arm64:
	@mkdir -p $(dir $(ARM64_OUT))
	$(ARM64_CC) -shared -fPIC -O2 -std=gnu11 -Wall -Wextra -fvisibility=hidden \
		-DNAPI_VERSION=8 -D_GNU_SOURCE -DNODE_GYP_MODULE_NAME=vsockdiag -DBUILDING_NODE_EXTENSION \
		-I$(NODE_INCLUDE) -o $(ARM64_OUT) $(wildcard guest-probe/native/src/*.c)
	@if command -v file >/dev/null; then file $(ARM64_OUT); else echo "built $(ARM64_OUT)"; fi

clean:
	rm -rf */dist vsockdiag-*.tgz test/.build guest-probe/native/build guest-probe/native/build-arm64 bin/vsockdiag bin/vsockdiag-probe test/fake-envd/fake-envd
