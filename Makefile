# vsockdiag — the two commands that matter: `make demo` and `make test`.
# Everything installs itself on a machine with Node 20, npm, python3, make and g++.

SHELL := /bin/bash
# node-gyp cannot download Node headers here; the machine has them in /usr/include/node.
export npm_config_nodedir ?= /usr

NODE_GYP := node guest-probe/node_modules/node-gyp/bin/node-gyp.js

.PHONY: install build test demo bench clean typecheck addon

install: node_modules/.modules.yaml

node_modules/.modules.yaml: package.json pnpm-lock.yaml pnpm-workspace.yaml */package.json scripts/install-system-deps.sh
	bash scripts/install-system-deps.sh
	pnpm install --frozen-lockfile
	@touch $@

addon: install
	cd guest-probe/native && npm_config_nodedir=$(npm_config_nodedir) node ../node_modules/node-gyp/bin/node-gyp.js rebuild --silent

typecheck: install
	pnpm exec tsc -p tsconfig.json --noEmit

build: install addon typecheck
	node guest-probe/build.mjs
	node host-collector/build.mjs
	pnpm --filter @vsockdiag/web-ui build
	@mkdir -p bin
	cp guest-probe/dist/vsockdiag-probe.js bin/vsockdiag-probe
	cp guest-probe/dist/vsockdiag.node bin/vsockdiag.node
	printf '#!/bin/sh\nexec node "$$(dirname "$$(readlink -f "$$0")")/../host-collector/dist/vsockdiag.js" "$$@"\n' > bin/vsockdiag
	chmod +x bin/vsockdiag bin/vsockdiag-probe

# Every suite; the last line is the totals across all of them: "N passed, N failed, N skipped".
test: build
	node test/run-tests.mjs

demo: build
	node test/run-ts.mjs test/demo.ts

bench: build
	node test/run-ts.mjs test/bench/run.ts

clean:
	rm -rf */dist test/.build guest-probe/native/build bin/vsockdiag bin/vsockdiag-probe bin/vsockdiag.node test/fake-envd/fake-envd
