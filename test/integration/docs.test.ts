// What the guides show as code is code that runs: docs/envd.md's notifier is the fake envd's,
// docs/orchestrator.md's readiness wait compiles.
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, expect, it } from 'vitest';
import { ROOT } from '../harness/collector.js';

const goBlocks = (doc: string) =>
  [...fs.readFileSync(path.join(ROOT, doc), 'utf8').matchAll(/^```go\n([\s\S]*?)^```$/gm)].map((m) => m[1]!);

const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) fs.rmSync(d, { recursive: true, force: true });
});

it("docs/envd.md's notifier is test/fake-envd/notify.go, the one the fake envd runs", () => {
  expect(goBlocks('docs/envd.md')).toContain(fs.readFileSync(path.join(ROOT, 'test/fake-envd/notify.go'), 'utf8'));
});

it("docs/orchestrator.md's waitReady compiles and passes go vet", () => {
  const [snippet] = goBlocks('docs/orchestrator.md').filter((b) => b.includes('func waitReady('));
  expect(snippet).toBeDefined();
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'vd-doc-go-'));
  dirs.push(dir);
  fs.writeFileSync(path.join(dir, 'go.mod'), 'module docsnippet\n\ngo 1.19\n');
  fs.writeFileSync(
    path.join(dir, 'main.go'),
    `package main\n\nimport (\n\t"context"\n\t"encoding/json"\n\t"fmt"\n\t"net/http"\n\t"net/url"\n)\n\n${snippet}\nfunc main() { _, _, _, _ = waitReady(context.Background(), "http://127.0.0.1:1", "", "x") }\n`,
  );
  const r = spawnSync(process.env.GO || 'go', ['vet', '.'], {
    cwd: dir,
    encoding: 'utf8',
    env: { ...process.env, GOTOOLCHAIN: 'local', GOPROXY: 'off', GOFLAGS: '' },
    timeout: 120_000,
  });
  expect(r.status, `${r.stderr}${r.stdout}`).toBe(0);
});
