// envd's MMDS poll storm (POST /init retries leaking PollForMMDSOpts goroutines, each polling
// 169.254.169.254:80 every 50 ms with keep-alive off), reproduced in a simulated sandbox:
// the sandbox's own network namespace carries 169.254.169.254/32 on its loopback, where a
// fake MMDS (`fake-envd -serve-mmds`) answers. Everything is read from the host through
// /proc/<pid>/net/tcp of a process inside the sandbox; the host's own namespace must never
// see that address.
//
// SAFETY: 169.254.169.254 exists only inside namespaces these tests create (startSandbox
// refuses `mmds: true` without one). The storm is bounded: 50 pollers for a few seconds,
// then stop() kills every process of the sandbox by pid, and the namespace goes with them.

import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { waitForState } from '../harness/collector.js';
import { waitFor } from '../support/wait.js';
import { testBed } from '../harness/testbed.js';
import { MMDS_ADDR, MMDS_IP, namespacesAvailable, startSandbox, type Sandbox } from '../harness/sandbox.js';

const canIsolate = namespacesAvailable();
if (!canIsolate) {
  console.warn(
    'mmds-*.test.ts: skipped: network + PID namespaces are unavailable here (needs root and ' +
      '`unshare --net --pid`); 169.254.169.254 is never used outside a test-made namespace.',
  );
}

// ---------------------------------------------------------------------------
// /proc/net/tcp{,6}

interface TcpSocket {
  local: string;
  remote: string;
  /** Kernel TCP state, hex as in the file: 01 ESTABLISHED, 06 TIME_WAIT, 0A LISTEN, ... */
  state: string;
}

/**
 * Decodes an address from /proc/net/tcp ("0100007F:0050") or tcp6. The kernel prints each
 * 32-bit word of the address as %08X of its in-memory (network order) bytes read as a host
 * integer, so on little-endian hosts every word's bytes come out reversed; the port is in
 * host order. 169.254.169.254:80 is thus "FEA9FEA9:0050" on x86, not "A9FEA9FE:0050".
 */
function decodeProcAddr(hex: string): string {
  const [addr, port] = hex.split(':') as [string, string];
  const bytes: number[] = [];
  for (let w = 0; w < addr.length; w += 8) {
    const word = Buffer.from(addr.slice(w, w + 8), 'hex');
    bytes.push(...(os.endianness() === 'LE' ? [...word].reverse() : [...word]));
  }
  const p = parseInt(port, 16);
  if (bytes.length === 4) return `${bytes.join('.')}:${p}`;
  // IPv6: show v4-mapped addresses as plain IPv4, the rest as 8 hex groups.
  if (bytes.slice(0, 10).every((b) => b === 0) && bytes[10] === 0xff && bytes[11] === 0xff) {
    return `${bytes.slice(12).join('.')}:${p}`;
  }
  const groups: string[] = [];
  for (let i = 0; i < 16; i += 2) groups.push(((bytes[i]! << 8) | bytes[i + 1]!).toString(16));
  return `[${groups.join(':')}]:${p}`;
}

/** Every TCP socket (IPv4 and IPv6, any state) of the network namespace of `procDir`. */
function tcpSockets(procDir: string): TcpSocket[] {
  const out: TcpSocket[] = [];
  for (const file of ['net/tcp', 'net/tcp6']) {
    let text = '';
    try {
      text = fs.readFileSync(path.join(procDir, file), 'utf8');
    } catch {
      continue; // e.g. no IPv6
    }
    for (const line of text.split('\n').slice(1)) {
      const f = line.trim().split(/\s+/);
      if (f.length < 4) continue;
      out.push({ local: decodeProcAddr(f[1]!), remote: decodeProcAddr(f[2]!), state: f[3]! });
    }
  }
  return out;
}

const toMMDS = (s: TcpSocket) => s.remote === MMDS_ADDR;
const touchesMMDSIP = (s: TcpSocket) => s.local.startsWith(`${MMDS_IP}:`) || s.remote.startsWith(`${MMDS_IP}:`);

function stateCounts(socks: TcpSocket[]): Record<string, number> {
  const names: Record<string, string> = {
    '01': 'ESTABLISHED',
    '02': 'SYN_SENT',
    '04': 'FIN_WAIT1',
    '05': 'FIN_WAIT2',
    '06': 'TIME_WAIT',
    '07': 'CLOSE',
    '08': 'CLOSE_WAIT',
    '09': 'LAST_ACK',
    '0A': 'LISTEN',
    '0B': 'CLOSING',
  };
  const counts: Record<string, number> = {};
  for (const s of socks) {
    const n = names[s.state] ?? s.state;
    counts[n] = (counts[n] ?? 0) + 1;
  }
  return counts;
}

// ---------------------------------------------------------------------------
// processes

function argv(pid: number): string[] {
  try {
    return fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').filter(Boolean);
  } catch {
    return [];
  }
}

/** Host pid of the sandbox's fake envd: argv[0] is the fake-envd binary and it is not the MMDS server. */
function envdPid(sb: Sandbox): number | undefined {
  return sb.pidsOf('fake-envd').find((p) => {
    const a = argv(p);
    return path.basename(a[0] ?? '') === 'fake-envd' && !a.includes('-serve-mmds');
  });
}

/** Host pid of the sandbox's fake MMDS server. */
function mmdsPid(sb: Sandbox): number | undefined {
  return sb.pidsOf('-serve-mmds').find((p) => argv(p).includes('-serve-mmds'));
}

/** The pid as seen inside the process's innermost PID namespace (last NSpid field). */
function nsPid(pid: number): number {
  const m = /^NSpid:\s+(.+)$/m.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'));
  return Number(m![1]!.trim().split(/\s+/).at(-1));
}

const netns = (procDir: string) => fs.readlinkSync(path.join(procDir, 'ns/net'));

// ---------------------------------------------------------------------------

/** The host's own namespace: no socket at all to or from 169.254.169.254, and no such address. */
function expectHostClean(): void {
  expect(tcpSockets('/proc/self').filter(touchesMMDSIP)).toEqual([]);
  const ip = spawnSync('ip', ['-o', 'addr', 'show'], { encoding: 'utf8' });
  expect(ip.status).toBe(0);
  expect(ip.stdout).not.toContain(MMDS_IP);
}

describe.skipIf(!canIsolate)('MMDS inside a sandbox', () => {
  // Registered before the bed's hooks, so it runs after them, once the sandboxes are stopped:
  // stopped sandboxes leave nothing behind in the host namespace either.
  afterEach(() => expectHostClean());
  const bed = testBed(['--stall-after', '1500ms', '--start-deadline', '20s']);
  const { sandbox } = bed;

  it('reads 169.254.169.254:80 from /proc/net/tcp in host byte order', () => {
    const hex = os.endianness() === 'LE' ? 'FEA9FEA9:0050' : 'A9FEA9FE:0050';
    expect(decodeProcAddr(hex)).toBe(MMDS_ADDR);
    expect(decodeProcAddr(os.endianness() === 'LE' ? '0100007F:C350' : '7F000001:C350')).toBe('127.0.0.1:50000');
    const mapped = os.endianness() === 'LE' ? '0000000000000000FFFF0000FEA9FEA9:0050' : '00000000000000000000FFFFA9FEA9FE:0050';
    expect(decodeProcAddr(mapped)).toBe(MMDS_ADDR); // ::ffff:169.254.169.254 in tcp6
  });

  it('refuses mmds without a network namespace of its own', async () => {
    await expect(startSandbox({ id: 'mmds-noiso', root: bed.root, isolate: false, mmds: true })).rejects.toThrow(/isolated sandbox/);
    expect(fs.existsSync(path.join(bed.root, 'mmds-noiso'))).toBe(false);
  });

  it('-mmds-storm 50 against a 404 MMDS: hundreds of sockets to 169.254.169.254:80 in the sandbox, none on the host', async () => {
    const sb = await sandbox({ id: 'mmds-storm', mmds: true, envd: ['-mmds-addr', MMDS_ADDR, '-mmds-storm', '50'] });
    const envd = await waitFor('the fake envd to run', () => envdPid(sb), { timeoutMs: 10_000 });
    const mmds = mmdsPid(sb);
    expect(mmds, sb.output()).toBeGreaterThan(0);
    // Both live in the sandbox's own network namespace, not the host's.
    expect(netns(`/proc/${envd}`)).not.toBe(netns('/proc/self'));
    expect(netns(`/proc/${mmds}`)).toBe(netns(`/proc/${envd}`));

    const started = Date.now();
    let last: TcpSocket[] = [];
    await waitFor(
      '500 sockets to 169.254.169.254:80 in the sandbox',
      () => {
        last = tcpSockets(`/proc/${envd}`).filter(toMMDS);
        return last.length >= 500;
      },
      { timeoutMs: 5_000 },
    );
    const tookMs = Date.now() - started;
    // A little longer, to see it keep growing (the pollers never stop).
    await new Promise((r) => setTimeout(r, 500));
    const later = tcpSockets(`/proc/${envd}`).filter(toMMDS);
    expect(later.length).toBeGreaterThan(last.length);
    console.log(
      `mmds-storm: ${last.length} sockets to ${MMDS_ADDR} after ${tookMs} ms ${JSON.stringify(stateCounts(last))}; ` +
        `${later.length} after ${Date.now() - started} ms ${JSON.stringify(stateCounts(later))}`,
    );
    // The client side (envd) closes first, so what piles up is envd's TIME_WAIT, as in a VM.
    expect(stateCounts(later).TIME_WAIT ?? 0).toBeGreaterThan(later.length / 2);
    expect(sb.output()).toContain('starting 50 pollers against http://169.254.169.254:80');
    expect(sb.output()).toContain('fake-envd: mmds: serving a fake MMDS on 169.254.169.254:80');
    expect(sb.output()).not.toContain('got opts');

    expectHostClean();
  });

  it('one poller against an ok MMDS gets its opts and stops; envd goes on to READY', async () => {
    const sb = await sandbox({ id: 'mmds-ok', mmds: true, mmdsReply: 'ok', envd: ['-mmds-addr', MMDS_ADDR] });
    await waitFor('envd to get its MMDS opts', () => sb.output().includes('fake-envd: mmds: got opts from http://169.254.169.254:80'), {
      timeoutMs: 10_000,
    });
    await waitFor('fake-envd: ready', () => sb.output().includes('fake-envd: ready'), { timeoutMs: 10_000 });
    const d = await waitForState(bed.collector, 'mmds-ok', 'ready', 20_000);
    expect(d.readiness).toMatchObject({ reportsPhases: true, ready: true });

    // The probe follows envd, not the MMDS server (which runs as fake-mmds, not fake-envd).
    const envd = envdPid(sb)!;
    const mmds = mmdsPid(sb)!;
    expect(envd).toBeGreaterThan(0);
    expect(mmds).toBeGreaterThan(0);
    expect(d.target.pid).toBe(nsPid(envd));
    expect(d.target.pid).not.toBe(nsPid(mmds));
    expect(fs.readFileSync(`/proc/${mmds}/comm`, 'utf8').trim()).toBe('fake-mmds');

    // The poller stopped at its first 200: no new connections to the MMDS.
    const before = tcpSockets(`/proc/${envd}`).filter(toMMDS).length;
    expect(before).toBeGreaterThan(0);
    expect(before).toBeLessThan(20);
    await new Promise((r) => setTimeout(r, 300));
    expect(tcpSockets(`/proc/${envd}`).filter(toMMDS).length).toBe(before);
    expectHostClean();
  });
});
