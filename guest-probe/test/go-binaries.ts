// Real stripped Go binaries for the Go reader's tests: esbuild and buf builds from npm, each
// installed by pnpm as a gobin-<go version>-<arch> alias of the test workspace package
// (test/package.json; pnpm-workspace.yaml's supportedArchitectures brings the arm64 ones).
// Nobody here built them: they are what real Go toolchains of each version produce.
import { execFile } from 'node:child_process';
import { existsSync, mkdirSync, renameSync, rmSync, statSync, readdirSync } from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';

const repo = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');

export interface GoTestBinary {
  /** Version string inside the binary. */
  go: string;
  minor: number;
  arch: 'amd64' | 'arm64';
  kind: 'esbuild' | 'buf';
  /** npm package it came from, for messages. */
  pkg: string;
  path: string;
}

const SOURCES: [go: string, kind: GoTestBinary['kind'], version: string][] = [
  ['go1.20.4', 'esbuild', '0.17.19'],
  ['go1.20.12', 'esbuild', '0.21.5'],
  ['go1.21.4', 'buf', '1.28.1'],
  ['go1.22.5', 'esbuild', '0.23.1'],
  ['go1.23.1', 'esbuild', '0.24.2'],
  ['go1.23.12', 'esbuild', '0.25.12'],
  ['go1.24.4', 'buf', '1.55.1'],
  ['go1.25.7', 'esbuild', '0.27.7'],
  ['go1.26.5', 'esbuild', '0.28.2'],
];

function entry(go: string, kind: GoTestBinary['kind'], version: string, arch: GoTestBinary['arch']): GoTestBinary {
  const dir = path.join(repo, 'test', 'node_modules', `gobin-${go}-${arch}`);
  const pkg =
    kind === 'esbuild'
      ? `@esbuild/linux-${arch === 'amd64' ? 'x64' : 'arm64'}@${version}`
      : `@bufbuild/buf-linux-${arch === 'amd64' ? 'x64' : 'aarch64'}@${version}`;
  return {
    go,
    minor: Number(go.split('.')[1]),
    arch,
    kind,
    pkg,
    path: path.join(dir, 'bin', kind === 'esbuild' ? 'esbuild' : 'buf'),
  };
}

export const GO_BINARIES: GoTestBinary[] = SOURCES.flatMap(([go, kind, v]) => [entry(go, kind, v, 'amd64'), entry(go, kind, v, 'arm64')]);

/** Throws a message that says how to get the binary when it is not installed. */
export function requireBinary(b: GoTestBinary): string {
  if (!existsSync(b.path)) throw new Error(`${b.path} missing: run pnpm install (test/package.json gobin-${b.go}-${b.arch} = ${b.pkg})`);
  return b.path;
}

/** A loopback TCP port that was free a moment ago. */
export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const a = s.address();
      s.close(() => resolve(typeof a === 'object' && a ? a.port : 0));
    });
  });
}

/** Polls until an HTTP GET of url answers (any status); throws after deadlineMs. */
export async function waitForHttp(url: string, deadlineMs = 30_000): Promise<Response> {
  const end = Date.now() + deadlineMs;
  let last: unknown;
  while (Date.now() < end) {
    try {
      return await fetch(url, { signal: AbortSignal.timeout(5_000) });
    } catch (err) {
      last = err;
      await new Promise((r) => setTimeout(r, 100));
    }
  }
  throw new Error(`no HTTP answer from ${url} within ${deadlineMs} ms: ${String(last)}`);
}

const execFileAsync = promisify(execFile);
const fakeEnvdDir = path.join(repo, 'test', 'fake-envd');

/**
 * The fake envd built exactly as E2B builds envd (`go build -trimpath -ldflags "-s -w
 * -buildid="`, CGO off): stripped, with the Go on PATH (Debian's go1.19 here). Cached in
 * test/.cache/go-reader/ and rebuilt when a source is newer. `pie`: the same as a
 * position-independent executable (-buildmode=pie), loaded at a random base.
 */
export async function buildStrippedFakeEnvd(opts: { pie?: boolean } = {}): Promise<string> {
  const cache = path.join(repo, 'test', '.cache', 'go-reader');
  const out = path.join(cache, opts.pie ? 'fake-envd-stripped-pie' : 'fake-envd-stripped');
  const sources = readdirSync(fakeEnvdDir).filter((f) => f.endsWith('.go') || f === 'go.mod');
  const newest = Math.max(...sources.map((f) => statSync(path.join(fakeEnvdDir, f)).mtimeMs));
  if (existsSync(out) && statSync(out).mtimeMs >= newest) return out;
  mkdirSync(cache, { recursive: true });
  const tmp = `${out}.tmp-${process.pid}`;
  const env: NodeJS.ProcessEnv = { ...process.env, GOTOOLCHAIN: 'local', GOPROXY: 'off', GOFLAGS: '', CGO_ENABLED: '0' };
  // Go's default cache is under $HOME; without one, the same fallback as test/harness/fake-envd.ts.
  if (!process.env.GOCACHE && !process.env.HOME) env.GOCACHE = path.join(repo, 'test', '.cache', 'go-build');
  try {
    await execFileAsync(
      process.env.GO || 'go',
      ['build', ...(opts.pie ? ['-buildmode=pie'] : []), '-trimpath', '-ldflags', '-s -w -buildid=', '-o', tmp, '.'],
      {
        cwd: fakeEnvdDir,
        env,
        timeout: 300_000,
      },
    );
    renameSync(tmp, out);
  } catch (err) {
    rmSync(tmp, { force: true });
    throw err;
  }
  return out;
}

/** "goroutine N ..." blocks of a dump, by goid (goroutine 0, the signal handler's g0, left out). */
export function goroutineBlocks(text: string): Map<number, string[]> {
  const out = new Map<number, string[]>();
  for (const raw of text.split('\n\n')) {
    const lines = raw.replace(/^\n+/, '').split('\n');
    const m = /^goroutine (\d+) /.exec(lines[0] ?? '');
    if (!m || m[1] === '0') continue;
    // The last block of a SIGQUIT dump runs on into the register dump ("rax    0x0").
    const end = lines.findIndex((l) => /^[a-z0-9]{2,6}\s+0x[0-9a-f]+$/.test(l));
    out.set(
      Number(m[1]),
      (end >= 0 ? lines.slice(0, end) : lines).filter((l) => l !== ''),
    );
  }
  return out;
}

/** Function names, innermost first ("created by" excluded). */
export function funcNames(block: string[]): string[] {
  return block
    .slice(1)
    .filter((l) => !l.startsWith('\t') && !l.startsWith('created by ') && !l.startsWith('...'))
    .map((l) => l.slice(0, l.lastIndexOf('(')));
}
