// Live Go dumps: the fake envd (test/fake-envd, built with the local Go toolchain) hung in
// phase cgroup-manager, dumped with SIGQUIT (GOTRACEBACK=all: the dump goes to stderr and
// the process exits with status 2), then parsed and grouped. Skipped when Go is missing.
// Everything stays on 127.0.0.1; the MMDS storm points at a loopback port nobody listens on.
import { spawn, spawnSync } from 'node:child_process';
import { once } from 'node:events';
import net from 'node:net';
import { describe, expect, it } from 'vitest';
import { buildFakeEnvd } from '../../test/harness/fake-envd.js';
import { childReaper, waitUntilAsleep } from '../../test/support/children.js';
import { detectDumpKind } from '../src/dumps/detect.js';
import { parseGoroutines } from '../src/dumps/goroutines.js';
import { groupByCreator, summarizeCreators } from '../src/dumps/creators.js';
import { groupGoroutines, summarize } from '../src/dumps/group.js';

const haveGo = spawnSync(process.env.GO || 'go', ['version'], { stdio: 'ignore' }).status === 0;

const children = childReaper();

/** A loopback port with nothing listening on it (bound, then closed). */
async function closedPort(): Promise<number> {
  const srv = net.createServer();
  await new Promise<void>((resolve) => srv.listen(0, '127.0.0.1', resolve));
  const port = (srv.address() as net.AddressInfo).port;
  await new Promise<void>((resolve) => srv.close(() => resolve()));
  return port;
}

/**
 * Starts the fake envd with `args`, waits until stderr shows every string in `ready` and then
 * for `settled` (the line is read before its write returns: the hang comes after), sends
 * SIGQUIT and returns stderr and the exit status.
 */
async function sigquitDump(
  args: string[],
  ready: string[],
  settled: (pid: number) => Promise<void>,
): Promise<{ stderr: string; code: number | null }> {
  const bin = await buildFakeEnvd();
  const child = spawn(bin, args, {
    env: { ...process.env, GOTRACEBACK: 'all' },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  children.track(child);
  let stderr = '';
  const exited = once(child, 'exit') as Promise<[number | null, NodeJS.Signals | null]>;
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`fake envd never printed ${JSON.stringify(ready)}; stderr:\n${stderr}`)), 15_000);
    child.stderr!.setEncoding('utf8');
    child.stderr!.on('data', (chunk: string) => {
      stderr += chunk;
      if (ready.every((s) => stderr.includes(s))) {
        clearTimeout(timer);
        resolve();
      }
    });
    void exited.then(() => reject(new Error(`fake envd exited early; stderr:\n${stderr}`)));
  });
  await settled(child.pid!);
  process.kill(child.pid!, 'SIGQUIT');
  const [code] = await exited;
  // Drain what is left of stderr.
  if (!child.stderr!.readableEnded) await once(child.stderr!, 'end').catch(() => undefined);
  return { stderr, code };
}

describe.skipIf(!haveGo)('SIGQUIT dumps of the live fake envd', () => {
  it('hung in cgroup-manager: the top group is blocked in acquireRoot', { timeout: 320_000 }, async () => {
    const { stderr, code } = await sigquitDump(
      ['-addr', '127.0.0.1', '-port', '0', '-hang-in', 'cgroup-manager', '-no-notify'],
      ['envd startup: creating cgroup manager'],
      (pid) => waitUntilAsleep(pid),
    );
    expect(code).toBe(2);
    expect(detectDumpKind(stderr)).toBe('goroutines');
    const dump = parseGoroutines(stderr);
    expect(dump.reason).toBe('SIGQUIT: quit');
    expect(dump.truncated).toBeUndefined();
    const groups = groupGoroutines(dump);
    console.log(`live fake envd dump:\n${summarize(groups)}`);
    const top = groups[0]!;
    expect(['main.(*cgroupManager).acquireRoot', 'main.createCgroupManager']).toContain(top.blockedIn?.func);
    expect(['sync.Mutex.Lock', 'semacquire']).toContain(top.state);
    expect(top.application).toBe(true);
  });

  // Where each poller is caught (waiting for its tick, dialling, reading, in net/http's
  // plumbing) depends on the timing: on a busy machine the 200 split into several stack
  // groups. By creator they are one group whatever the timing, and that is what is asserted;
  // of the stack groups, only what holds at any instant.
  it('with an MMDS storm of 200 pollers: one creator group of 200, whatever their stacks', { timeout: 320_000 }, async () => {
    const port = await closedPort();
    const { stderr, code } = await sigquitDump(
      [
        '-addr',
        '127.0.0.1',
        '-port',
        '0',
        '-hang-in',
        'cgroup-manager',
        '-no-notify',
        '-mmds-addr',
        `127.0.0.1:${port}`,
        '-mmds-storm',
        '200',
      ],
      ['starting 200 pollers', 'envd startup: creating cgroup manager'],
      // The pollers keep threads waking: a while, not a look at thread states.
      () => new Promise((r) => setTimeout(r, 300)),
    );
    expect(code).toBe(2);
    const dump = parseGoroutines(stderr);
    expect(dump.headers).toBe(dump.goroutines.length);
    expect(dump.goroutines.filter((g) => g.unparsed)).toEqual([]);
    const groups = groupGoroutines(dump);
    const creators = groupByCreator(dump);
    console.log(
      `live fake envd dump with an MMDS storm (${dump.goroutines.length} goroutines):\n${summarize(groups, { limit: 8 })}\nby creator:\n${summarizeCreators(creators, { limit: 5 })}`,
    );
    const storm = creators.filter((c) => c.createdBy?.func === 'main.startMMDSPoller');
    expect(storm.map((c) => c.count)).toEqual([200]);
    expect(storm[0]!.ids).toHaveLength(20);
    expect(storm[0]!.application).toBe(true);
    expect(storm[0]!.states.reduce((n, s) => n + s.count, 0)).toBe(200);
    // It leads the creator view: the largest creator in application code (net/http's dialers
    // may be as many, but are not application code).
    expect(creators[0]).toBe(storm[0]);
    // However the stack groups split, together they hold the 200 pollers.
    const pollerGroups = groups.filter((g) => g.createdBy?.func === 'main.startMMDSPoller');
    expect(pollerGroups.reduce((n, g) => n + g.count, 0)).toBe(200);
    expect(pollerGroups.length).toBe(storm[0]!.stackGroups);
    const hung = groups.find((g) => g.blockedIn?.func === 'main.(*cgroupManager).acquireRoot');
    expect(['sync.Mutex.Lock', 'semacquire']).toContain(hung?.state);
    // Application groups lead, whatever the waits.
    expect(groups[0]?.application).toBe(true);
  });
});
