// Builds the fake envd test fixture (test/fake-envd, Go, stdlib only) on demand.
//
// `go build` runs only when the binary is missing or a .go file (or go.mod) is
// newer than it. The build never downloads anything: GOTOOLCHAIN=local, GOPROXY=off.
import { execFile } from 'node:child_process';
import { constants as fsConstants } from 'node:fs';
import { access, mkdir, readdir, rename, rm, stat } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';

const execFileAsync = promisify(execFile);

const testDir = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');

/** Source folder of the fixture. */
const fakeEnvdDir = path.join(testDir, 'fake-envd');

/** Where the built binary goes (gitignored). */
const fakeEnvdBinary = path.join(fakeEnvdDir, 'fake-envd');

/** The phases fake-envd walks by default, in order (PHASE= values; see test/fake-envd/phases.go). */
export const FAKE_ENVD_PHASES = [
  'run-dir',
  'mmds-poller',
  'logger',
  'router',
  'filesystem-rpc',
  'cgroup-manager',
  'workload-freezer',
  'process-rpc',
  'api',
  'port-scanner',
  'port-forwarder',
  'listen',
] as const;

let inFlight: Promise<string> | undefined;

/**
 * Builds test/fake-envd/fake-envd if it is missing or out of date and returns its
 * absolute path. Throws a clear error if `go` is not installed or the build fails.
 */
export async function buildFakeEnvd(): Promise<string> {
  // One build at a time per process; later callers share the result.
  inFlight ??= doBuild().finally(() => {
    inFlight = undefined;
  });
  return inFlight;
}

async function doBuild(): Promise<string> {
  // Check the sources first, so a missing folder is not mistaken for a missing `go`
  // (spawn reports a bad cwd as ENOENT too).
  const hasGoMod = await stat(path.join(fakeEnvdDir, 'go.mod')).then(
    (s) => s.isFile(),
    () => false,
  );
  if (!hasGoMod) throw new Error(`buildFakeEnvd: no Go module at ${fakeEnvdDir} (go.mod missing)`);
  if (!(await needsBuild())) return fakeEnvdBinary;

  const goBin = process.env.GO || 'go';
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    GOTOOLCHAIN: 'local',
    GOPROXY: 'off',
    GOFLAGS: '',
    CGO_ENABLED: '0',
  };
  if (!process.env.GOCACHE && !(await defaultGoCacheUsable())) {
    const cacheRoot = path.join(testDir, '.cache');
    env.GOCACHE = path.join(cacheRoot, 'go-build');
    env.GOPATH = process.env.GOPATH || path.join(cacheRoot, 'gopath');
    await mkdir(env.GOCACHE, { recursive: true });
  }

  // Build to a temporary name and rename, so a concurrent reader never sees half a binary.
  const tmp = `${fakeEnvdBinary}.tmp-${process.pid}`;
  try {
    await execFileAsync(goBin, ['build', '-o', tmp, '.'], {
      cwd: fakeEnvdDir,
      env,
      timeout: 300_000,
      maxBuffer: 16 * 1024 * 1024,
    });
    await rename(tmp, fakeEnvdBinary);
  } catch (err) {
    await rm(tmp, { force: true });
    const e = err as NodeJS.ErrnoException & { stderr?: string; stdout?: string };
    if (e.code === 'ENOENT') {
      throw new Error(
        `buildFakeEnvd: Go toolchain not found (tried to run "${goBin}"). ` +
          'Install Go >= 1.19 (Debian: apt-get install golang-go) or set GO=/path/to/go.',
      );
    }
    const output = [e.stderr, e.stdout].filter((s) => s?.trim()).join('\n');
    throw new Error(`buildFakeEnvd: go build in ${fakeEnvdDir} failed: ${e.message}${output ? `\n${output}` : ''}`);
  }
  return fakeEnvdBinary;
}

/** True if the binary is missing or any .go file / go.mod is newer than it. */
async function needsBuild(): Promise<boolean> {
  let binMtime: number;
  try {
    binMtime = (await stat(fakeEnvdBinary)).mtimeMs;
  } catch {
    return true;
  }
  const sources = (await readdir(fakeEnvdDir)).filter((f) => f.endsWith('.go') || f === 'go.mod');
  for (const f of sources) {
    if ((await stat(path.join(fakeEnvdDir, f))).mtimeMs > binMtime) return true;
  }
  return false;
}

/**
 * Whether Go's default cache location ($XDG_CACHE_HOME or $HOME/.cache) is usable,
 * i.e. exists as a writable directory or can be created.
 */
async function defaultGoCacheUsable(): Promise<boolean> {
  const home = process.env.HOME || os.homedir();
  const base = process.env.XDG_CACHE_HOME || (home ? path.join(home, '.cache') : '');
  return path.isAbsolute(base) && ensureWritableDir(base);
}

/** mkdir -p that reports failure instead of throwing (and never loops: no recursive mkdir). */
async function ensureWritableDir(dir: string): Promise<boolean> {
  try {
    if (!(await stat(dir)).isDirectory()) return false;
    await access(dir, fsConstants.W_OK);
    return true;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') return false;
  }
  const parent = path.dirname(dir);
  if (parent === dir || !(await ensureWritableDir(parent))) return false;
  try {
    await mkdir(dir);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EEXIST') return false;
  }
  return true;
}
