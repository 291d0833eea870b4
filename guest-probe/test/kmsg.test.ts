import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { accessSync, appendFileSync, chmodSync, constants, existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { MAX_TEXT, eventSchema, type EventBody } from '@vsockdiag/proto';
import { loadNative } from '../src/native.js';
import { KMSG_MAX_LINE, KmsgReader, classifyKernelMessage, parseKmsgLine, type KernelEvent, type KmsgOptions } from '../src/kmsg.js';

// EPIPE (the kernel overwrote records before they were read) cannot be produced with a regular
// file; the device path counts it in `counters.overwritten` and continues (scripted reads on a
// character device, below). What files can show is the consequence: a gap in SEQ, counted in
// `counters.lost` (tested below).

let root: string;
let n = 0;
beforeAll(() => {
  root = mkdtempSync(join(tmpdir(), 'kmsg-'));
});
afterAll(() => {
  rmSync(root, { recursive: true, force: true });
});

function file(content: string | Buffer = ''): string {
  const p = join(root, `kmsg-${++n}`);
  writeFileSync(p, content);
  return p;
}

function reader(path: string, extra: Partial<KmsgOptions> = {}) {
  const events: KernelEvent[] = [];
  const logs: string[] = [];
  const r = new KmsgReader({
    path,
    emit: (body: EventBody) => {
      // Every event must pass the protocol schema the probe checks before its ring.
      eventSchema.parse({ ...body, seq: 1, t: 0 });
      expect(body.kind).toBe('kernel');
      events.push(body as KernelEvent);
    },
    log: (_level, message) => logs.push(message),
    ...extra,
  });
  return { r, events, logs };
}

const lines = (...l: string[]) => l.map((x) => `${x}\n`).join('');

// Real-format records, as a 6.x kernel writes them to /dev/kmsg.
const BOOT = lines(
  '5,0,0,-;Linux version 6.1.102 (builder@buildhost) (gcc (GCC) 11.4.0) #1 SMP PREEMPT_DYNAMIC',
  '6,1,0,-;Command line: console=ttyS0 reboot=k panic=1 pci=off',
  '6,2,0,-;BIOS-provided physical RAM map:',
  '6,3,0,-;BIOS-e820: [mem 0x0000000000000000-0x000000000009fbff] usable',
  '6,120,512340,-;virtio_blk virtio0: [vda] 2097152 512-byte logical blocks (1.07 GB/1.00 GiB)',
  ' SUBSYSTEM=virtio',
  ' DEVICE=+virtio:virtio0',
  '6,121,612000,-,caller=T1;EXT4-fs (vda): mounted filesystem with ordered data mode. Quota mode: none.',
  '6,122,700000,-;Run /sbin/init as init process',
  '4,123,800000,-;random: crng init done',
);

const OOM_REPORT = lines(
  '4,230,1500000,-;envd invoked oom-killer: gfp_mask=0x140cca(GFP_HIGHUSER_MOVABLE|__GFP_COMP), order=0, oom_score_adj=0',
  '4,231,1500001,-;CPU: 0 PID: 1234 Comm: envd Not tainted 6.1.102 #1',
  '6,232,1500100,-;Tasks state (memory values in pages):',
  '6,233,1500101,-;[  pid  ]   uid  tgid total_vm      rss pgtables_bytes swapents oom_score_adj name',
  '6,234,1500102,-;[   1234]     0  1234   123456    98765   901120        0             0 envd',
  '6,235,1500103,-;oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),cpuset=/,mems_allowed=0,global_oom,task_memcg=/,task=envd,pid=1234,uid=0',
  '3,236,1500104,-;Out of memory: Killed process 1234 (envd) total-vm:493824kB, anon-rss:395060kB, file-rss:0kB, shmem-rss:0kB, UID:0 pgtables:880kB oom_score_adj:0',
  '6,237,1500500,-;oom_reaper: reaped process 1234 (envd), now anon-rss:0kB, file-rss:0kB, shmem-rss:0kB',
);

const HUNG = lines(
  '3,300,245760000,-;INFO: task envd:1234 blocked for more than 120 seconds.',
  '3,301,245760010,-;      Not tainted 6.1.102 #1',
  '3,302,245760020,-;"echo 0 > /proc/sys/kernel/hung_task_timeout_secs" disables this message.',
  '6,303,245760030,-;task:envd            state:D stack:0     pid:1234  ppid:1      flags:0x00004000',
);

const SEGV = lines(
  '6,400,300000000,-;envd[1234]: segfault at 0 ip 000000000046f8c1 sp 000000c000047f38 error 4 in envd[400000+3d0000] likely on CPU 1 (core 1, socket 0)',
  '6,401,300000001,-;Code: 48 8b 04 24 48 89 44 24 08 c3 cc cc cc cc cc cc',
  '6,402,300000500,-;traps: envd[1235] general protection fault ip:46f8c1 sp:c000047f38 error:0 in envd[400000+3d0000]',
);

describe('parseKmsgLine', () => {
  it('reads the /dev/kmsg record prefix', () => {
    expect(parseKmsgLine('6,339,5140900,-;NET: Registered protocol family 10')).toEqual({
      message: 'NET: Registered protocol family 10',
      seq: 339,
      facility: 0,
      kernelMs: 5140.9,
    });
    // Extra fields after FLAGS (caller=…), continuation flag, userspace facility (1 << 3 | 6).
    expect(parseKmsgLine('4,10,1,c,caller=T1;x')).toMatchObject({ message: 'x', seq: 10, facility: 0, kernelMs: 0.001 });
    expect(parseKmsgLine('14,11,2000,-;systemd[1]: hello')).toMatchObject({ facility: 1, seq: 11, kernelMs: 2 });
    // Messages may contain ';' and ','.
    expect(parseKmsgLine('6,1,0,-;a;b,c').message).toBe('a;b,c');
  });

  it('reads dmesg-style lines and bare messages', () => {
    expect(parseKmsgLine('[   12.345678] Out of memory: x')).toEqual({ message: 'Out of memory: x', kernelMs: 12345.678 });
    expect(parseKmsgLine('[0.5] x')).toEqual({ message: 'x', kernelMs: 500 });
    expect(parseKmsgLine('[   1234]     0  1234 envd')).toEqual({ message: '[   1234]     0  1234 envd' });
    expect(parseKmsgLine('plain words')).toEqual({ message: 'plain words' });
  });
});

describe('classifyKernelMessage', () => {
  const table: Array<[string, Partial<KernelEvent> | null]> = [
    // OOM, as 5.x/6.x kernels print it, the older bare form, cgroup and allocating-task forms.
    [
      'Out of memory: Killed process 1234 (envd) total-vm:493824kB, anon-rss:395060kB, file-rss:0kB, shmem-rss:0kB, UID:0 pgtables:880kB oom_score_adj:0',
      { what: 'oom', process: 'envd', pid: 1234 },
    ],
    ['Killed process 1234 (envd) total-vm:493824kB, anon-rss:395060kB, file-rss:0kB', { what: 'oom', process: 'envd', pid: 1234 }],
    ['Memory cgroup out of memory: Killed process 1234 (envd)', { what: 'oom', process: 'envd', pid: 1234 }],
    ['Memory cgroup out of memory: Killed process 77 (node) total-vm:1kB, anon-rss:1kB', { what: 'oom', process: 'node', pid: 77 }],
    ['Out of memory (oom_kill_allocating_task): Killed process 9 (stress) total-vm:1kB', { what: 'oom', process: 'stress', pid: 9 }],
    [
      'oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),cpuset=/,mems_allowed=0,global_oom,task_memcg=/,task=envd,pid=1234,uid=0',
      { what: 'oom', process: 'envd', pid: 1234 },
    ],
    [
      'oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0,oom_memcg=/sandbox,task_memcg=/sandbox,task=my,app,pid=42,uid=1000',
      { what: 'oom', process: 'my,app', pid: 42 },
    ],
    // comm may hold spaces, parentheses, colons and brackets (it is any 15 bytes).
    ['Out of memory: Killed process 5 (a) b) total-vm:1kB', { what: 'oom', process: 'a) b', pid: 5 }],
    ['Out of memory: Killed process 5 (Web Content) total-vm:1kB', { what: 'oom', process: 'Web Content', pid: 5 }],
    // Hung task.
    ['INFO: task envd:1234 blocked for more than 120 seconds.', { what: 'hung-task', process: 'envd', pid: 1234 }],
    ['INFO: task kworker/0:1:15 blocked for more than 245 seconds.', { what: 'hung-task', process: 'kworker/0:1', pid: 15 }],
    // Segfaults (x86 with and without the 6.x CPU suffix, arm64) and x86 traps.
    [
      'envd[1234]: segfault at 0 ip 000000000046f8c1 sp 000000c000047f38 error 4 in envd[400000+3d0000]',
      { what: 'segfault', process: 'envd', pid: 1234 },
    ],
    [
      'my worker[77]: segfault at 10 ip 00007f0000001000 sp 00007ffd00000000 error 6 in libc.so.6[7f0000000000+1000] likely on CPU 0 (core 0, socket 0)',
      { what: 'segfault', process: 'my worker', pid: 77 },
    ],
    ['a[b[9]: segfault at 0 ip 0 sp 0 error 4', { what: 'segfault', process: 'a[b', pid: 9 }],
    [
      'envd[1234]: unhandled exception: DABT (lower EL), ESR 0x92000006, level 2 translation fault in envd[400000+3d0000]',
      { what: 'segfault', process: 'envd', pid: 1234 },
    ],
    [
      'traps: envd[1234] general protection fault ip:46f8c1 sp:c000047f38 error:0 in envd[400000+3d0000]',
      { what: 'segfault', process: 'envd', pid: 1234 },
    ],
    [
      'traps: envd[1234] trap invalid opcode ip:46f8c1 sp:c000047f38 error:0 in envd[400000+3d0000]',
      { what: 'segfault', process: 'envd', pid: 1234 },
    ],
    // Not events: the OOM report's other lines, the victim choice of older kernels, noise.
    ['envd invoked oom-killer: gfp_mask=0x140cca(GFP_HIGHUSER_MOVABLE|__GFP_COMP), order=0, oom_score_adj=0', null],
    ['Out of memory: Kill process 1234 (envd) score 900 or sacrifice child', null],
    ['oom_reaper: reaped process 1234 (envd), now anon-rss:0kB, file-rss:0kB, shmem-rss:0kB', null],
    ['[   1234]     0  1234   123456    98765   901120        0             0 envd', null],
    ['"echo 0 > /proc/sys/kernel/hung_task_timeout_secs" disables this message.', null],
    ['task:envd            state:D stack:0     pid:1234  ppid:1      flags:0x00004000', null],
    ['INFO: rcu_sched self-detected stall on CPU', null],
    ['Linux version 6.1.102 (builder@buildhost) #1 SMP', null],
    ['EXT4-fs (vda): mounted filesystem with ordered data mode.', null],
    ['systemd[1]: segfault handler installed', null],
    ['', null],
  ];

  it.each(table)('%s', (message, expected) => {
    const ev = classifyKernelMessage(message);
    if (expected === null) return expect(ev).toBeNull();
    expect(ev).toEqual({ kind: 'kernel', message, ...expected });
    eventSchema.parse({ ...ev, seq: 1, t: 0 });
  });

  it('cuts messages to MAX_TEXT and names to MAX_NAME, drops impossible pids', () => {
    const long = `Out of memory: Killed process 12 (envd) total-vm:1kB ${'x'.repeat(10_000)}`;
    expect(classifyKernelMessage(long)!.message).toHaveLength(MAX_TEXT);
    const name = 'n'.repeat(400);
    const ev = classifyKernelMessage(`oom-kill:constraint=CONSTRAINT_NONE,task=${name},pid=99999999999,uid=0`)!;
    expect(ev.process).toHaveLength(256);
    expect(ev.pid).toBeUndefined();
    expect(classifyKernelMessage('INFO: task envd:0 blocked for more than 1 seconds.')!.pid).toBeUndefined();
  });
});

describe('KmsgReader on a file', () => {
  it('reports OOM, hung task and segfaults among boot noise, with kernel time', () => {
    const { r, events, logs } = reader(file(BOOT + OOM_REPORT + HUNG + SEGV));
    expect(r.poll()).toBeGreaterThan(20);
    r.close();
    expect(logs).toEqual([]);
    expect(events.map((e) => [e.what, e.process, e.pid, e.kernelMs])).toEqual([
      ['oom', 'envd', 1234, 1500.104],
      ['hung-task', 'envd', 1234, 245760],
      ['segfault', 'envd', 1234, 300000],
      ['segfault', 'envd', 1235, 300000.5],
    ]);
    // The OOM pair is one event: the kill with its sizes, then the summary (constraint, cgroup).
    expect(events[0]!.message).toBe(
      'Out of memory: Killed process 1234 (envd) total-vm:493824kB, anon-rss:395060kB, file-rss:0kB, shmem-rss:0kB, UID:0 pgtables:880kB oom_score_adj:0\n' +
        'oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),cpuset=/,mems_allowed=0,global_oom,task_memcg=/,task=envd,pid=1234,uid=0',
    );
    // The fixture is excerpts of a boot: its SEQ gaps (3→120, 123→230, 237→300, 303→400) count as lost.
    expect(r.counters).toMatchObject({ reported: 4, deduped: 1, lost: 116 + 106 + 62 + 96, old: 0 });
    // Continuation lines are not records.
    expect(r.counters.records).toBe(BOOT.split('\n').filter((l) => l && !l.startsWith(' ')).length + 8 + 4 + 3);
    expect(r.lastSeq).toBe(402);
  });

  it('is cheap and silent when nothing is new, and picks up records appended between polls', () => {
    const path = file(BOOT);
    const { r, events } = reader(path);
    expect(r.poll()).toBe(8);
    expect(r.poll()).toBe(0);
    expect(r.poll()).toBe(0);
    appendFileSync(path, HUNG);
    expect(r.poll()).toBe(4);
    expect(events.map((e) => e.what)).toEqual(['hung-task']);
    // A record written in two parts: nothing until its newline arrives.
    appendFileSync(path, '6,400,300000000,-;envd[1234]: segfault at 0 ip 000000000046f8c1');
    expect(r.poll()).toBe(0);
    appendFileSync(path, ' sp 000000c000047f38 error 4 in envd[400000+3d0000]\n');
    expect(r.poll()).toBe(1);
    expect(events.map((e) => e.what)).toEqual(['hung-task', 'segfault']);
    expect(events[1]!.message).toBe('envd[1234]: segfault at 0 ip 000000000046f8c1 sp 000000c000047f38 error 4 in envd[400000+3d0000]');
  });

  it('takes a final line without newline once it has stayed the same for a poll', () => {
    const path = file('[   12.500000] INFO: task envd:1234 blocked for more than 120 seconds.');
    const { r, events } = reader(path);
    r.poll();
    expect(events).toEqual([]);
    r.poll();
    expect(events).toMatchObject([{ what: 'hung-task', pid: 1234, kernelMs: 12500 }]);
    appendFileSync(path, '\n[   13.000000] envd[9]: segfault at 0 ip 0 sp 0 error 4 in envd[400000+1000]\n');
    r.poll();
    expect(events.map((e) => e.pid)).toEqual([1234, 9]);
  });

  it('reports only records with a SEQ above the last one seen, and counts SEQ gaps', () => {
    const path = file(HUNG);
    const { r, events } = reader(path);
    r.poll();
    // Older or repeated records (e.g. a replayed buffer) are skipped…
    appendFileSync(path, HUNG + lines('3,299,1,-;INFO: task old:1 blocked for more than 120 seconds.'));
    r.poll();
    expect(events).toHaveLength(1);
    expect(r.counters.old).toBe(5);
    // …and a jump in SEQ means records were lost.
    appendFileSync(path, lines('6,310,1,-;hello', '6,311,1,-;again'));
    r.poll();
    expect(r.counters.lost).toBe(6);
    expect(r.lastSeq).toBe(311);

    const after = reader(file(BOOT + HUNG + SEGV), { afterSeq: 303 });
    after.r.poll();
    expect(after.events.map((e) => e.what)).toEqual(['segfault', 'segfault']);
  });

  it('reads dmesg-style lines and bare messages', () => {
    const { r, events } = reader(
      file(
        lines(
          '[    0.000000] Linux version 6.1.102',
          '[  812.345678] Out of memory: Killed process 1234 (envd) total-vm:493824kB, anon-rss:395060kB',
          'Killed process 77 (node) total-vm:1kB, anon-rss:1kB, file-rss:0kB',
          'INFO: task envd:1234 blocked for more than 120 seconds.',
        ),
      ),
    );
    r.poll();
    expect(events.map((e) => [e.what, e.pid, e.kernelMs])).toEqual([
      ['oom', 1234, 812345.678],
      ['oom', 77, undefined],
      ['hung-task', 1234, undefined],
    ]);
  });

  it('ignores messages userspace wrote to /dev/kmsg (facility ≠ kernel)', () => {
    const { r, events } = reader(
      file(lines('12,500,1,-;Out of memory: Killed process 1 (fake) total-vm:1kB', '14,501,1,-;systemd[1]: envd[2]: segfault at 0 ip 0')),
    );
    r.poll();
    expect(events).toEqual([]);
    expect(r.counters.records).toBe(2);
  });

  it('survives a 100 KB line, a 3 MB line and binary bytes', () => {
    const path = file(
      Buffer.concat([
        Buffer.from(BOOT),
        Buffer.from(`6,130,1,-;${'A'.repeat(100_000)}\n`),
        Buffer.from([0x36, 0x2c, 0x31, 0x33, 0x31, 0x2c, 0x31, 0x2c, 0x2d, 0x3b, 0x00, 0xff, 0xfe, 0x1b, 0x80, 0x0a]),
        Buffer.from([0xde, 0xad, 0xbe, 0xef, 0x00, 0x0a]),
        Buffer.from(`[ 1.0] Out of memory: Killed process 3 (big) ${'B'.repeat(3 << 20)}\n`),
        Buffer.from(HUNG),
      ]),
    );
    const { r, events } = reader(path);
    for (let i = 0; i < 10; i++) r.poll();
    expect(events.map((e) => [e.what, e.pid])).toEqual([
      ['oom', 3],
      ['hung-task', 1234],
    ]);
    expect(events[0]!.message.length).toBe(MAX_TEXT);
    expect(r.counters.truncated).toBe(2);
    expect(r.counters.records).toBe(8 + 1 + 2 + 1 + 4);
  });

  it('cuts a long line to KMSG_MAX_LINE even when it arrives in pieces', () => {
    const path = file('[ 1.0] Out of memory: Killed process 4 (slow) ');
    const { r, events } = reader(path);
    r.poll();
    appendFileSync(path, 'C'.repeat(KMSG_MAX_LINE));
    r.poll();
    appendFileSync(path, `${'C'.repeat(50_000)}\n[ 2.0] Killed process 5 (next) total-vm:1kB\n`);
    r.poll();
    expect(events.map((e) => e.pid)).toEqual([4, 5]);
    expect(r.counters.truncated).toBe(1);
  });

  it('handles at most maxRecordsPerPoll records per poll', () => {
    const many = Array.from({ length: 2500 }, (_, i) => `6,${i},${i * 1000},-;noise ${i}\n`).join('');
    const { r } = reader(file(many + lines('3,2500,1,-;INFO: task envd:1 blocked for more than 120 seconds.')));
    expect(r.poll()).toBe(1000);
    expect(r.poll()).toBe(1000);
    expect(r.poll()).toBe(501);
    expect(r.poll()).toBe(0);
    expect(r.counters).toMatchObject({ records: 2501, reported: 1, lost: 0, old: 0 });

    const small = reader(file(many), { maxRecordsPerPoll: 10 });
    expect(small.r.poll()).toBe(10);
    expect(small.r.lastSeq).toBe(9);
  });

  it('reads at most maxBytesPerPoll bytes per poll', () => {
    const many = Array.from({ length: 1000 }, (_, i) => `6,${i},0,-;${'x'.repeat(90)}\n`).join('');
    const { r } = reader(file(many), { maxBytesPerPoll: 10_000 });
    const first = r.poll();
    expect(first).toBeGreaterThan(50);
    expect(first).toBeLessThan(110);
    let total = first;
    for (let i = 0; i < 20; i++) total += r.poll();
    expect(total).toBe(1000);
  });
});

describe('KmsgReader OOM pairs', () => {
  const SUMMARY = (pid: number, seq: number) =>
    `6,${seq},${seq * 1000},-;oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0,oom_memcg=/sb,task_memcg=/sb,task=envd,pid=${pid},uid=0`;
  const KILLED = (pid: number, seq: number) =>
    `3,${seq},${seq * 1000},-;Memory cgroup out of memory: Killed process ${pid} (envd) total-vm:493824kB, anon-rss:395060kB, file-rss:0kB, shmem-rss:0kB, UID:0 pgtables:880kB oom_score_adj:0`;

  it('reports a summary and a Killed line for the same pid once', () => {
    const { r, events } = reader(file(lines(SUMMARY(10, 1), KILLED(10, 2))));
    r.poll();
    expect(events).toHaveLength(1);
    expect(events[0]).toMatchObject({ what: 'oom', pid: 10, process: 'envd', kernelMs: 2 });
    expect(events[0]!.message.split('\n')).toHaveLength(2);
  });

  it('reports kills of different pids separately', () => {
    const { r, events } = reader(file(lines(SUMMARY(10, 1), KILLED(10, 2), SUMMARY(11, 3), KILLED(11, 4), KILLED(12, 5))));
    r.poll();
    r.poll();
    expect(events.map((e) => e.pid)).toEqual([10, 11, 12]);
    // A summary whose Killed line names another pid stays its own event.
    const other = reader(file(lines(SUMMARY(20, 1), KILLED(21, 2))));
    other.r.poll();
    expect(other.events.map((e) => e.pid)).toEqual([20, 21]);
  });

  it('joins a pair split across polls, and reports a lone summary after one more poll', () => {
    const path = file(lines(SUMMARY(10, 1)));
    const { r, events } = reader(path);
    r.poll();
    expect(events).toEqual([]);
    appendFileSync(path, lines(KILLED(10, 2)));
    r.poll();
    expect(events).toHaveLength(1);
    expect(events[0]!.message).toContain('Killed process 10');

    appendFileSync(path, lines(SUMMARY(30, 3)));
    r.poll();
    expect(events).toHaveLength(1);
    r.poll();
    expect(events).toHaveLength(2);
    expect(events[1]).toMatchObject({ pid: 30, process: 'envd' });
    expect(events[1]!.message).toMatch(/^oom-kill:/);
    // Its late Killed line (within the window) is not a second kill.
    appendFileSync(path, lines(KILLED(30, 4)));
    r.poll();
    expect(events).toHaveLength(2);
    expect(r.counters.deduped).toBe(2);
  });

  it('reports a pending summary on close', () => {
    const { r, events } = reader(file(lines(SUMMARY(10, 1))));
    r.poll();
    r.close();
    expect(events.map((e) => e.pid)).toEqual([10]);
    expect(r.poll()).toBe(0);
  });

  it('dedupes the Killed-then-summary order and the 4.x "Kill process … sacrifice child" report', () => {
    const { r, events } = reader(file(lines(KILLED(10, 1), SUMMARY(10, 2))));
    r.poll();
    expect(events.map((e) => e.pid)).toEqual([10]);

    const old = reader(
      file(
        lines(
          '6,1,1000,-;oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),cpuset=/,mems_allowed=0,global_oom,task_memcg=/,task=envd,pid=1234,uid=0',
          '3,2,1001,-;Out of memory: Kill process 1234 (envd) score 900 or sacrifice child',
          '3,3,1002,-;Killed process 1234 (envd) total-vm:493824kB, anon-rss:395060kB, file-rss:0kB, shmem-rss:0kB',
        ),
      ),
    );
    old.r.poll();
    expect(old.events).toHaveLength(1);
    expect(old.events[0]).toMatchObject({ pid: 1234, process: 'envd', kernelMs: 1.002 });
  });

  it('reports the same pid again when it is a later kill', () => {
    const noise = Array.from({ length: 40 }, (_, i) => `6,${3 + i},0,-;noise`);
    const { r, events } = reader(file(lines(SUMMARY(10, 1), KILLED(10, 2), ...noise, KILLED(10, 100))));
    r.poll();
    expect(events.map((e) => e.pid)).toEqual([10, 10]);
  });
});

describe('KmsgReader on an unreadable path', () => {
  it('logs once and stops polling when the path is missing', () => {
    const { r, events, logs } = reader(join(root, 'no-such-kmsg'));
    expect(() => {
      for (let i = 0; i < 5; i++) r.poll();
    }).not.toThrow();
    expect(logs).toHaveLength(1);
    expect(logs[0]).toMatch(/no-such-kmsg.*ENOENT/);
    expect(events).toEqual([]);
    expect(r.active).toBe(false);
  });

  it('logs once when reads fail (a directory)', () => {
    const { r, logs } = reader(root);
    r.poll();
    r.poll();
    expect(logs).toHaveLength(1);
    expect(logs[0]).toMatch(/EISDIR/);
    expect(r.active).toBe(false);
  });

  it.skipIf(process.getuid?.() === 0)('logs once when permission is denied', () => {
    const path = file(HUNG);
    chmodSync(path, 0o000);
    const { r, logs } = reader(path);
    r.poll();
    r.poll();
    expect(logs).toHaveLength(1);
    expect(logs[0]).toMatch(/EACCES/);
  });
});

const canReadKmsg = (() => {
  if (process.getuid?.() !== 0 || !existsSync('/dev/kmsg')) return false;
  try {
    accessSync('/dev/kmsg', constants.R_OK);
    return true;
  } catch {
    return false;
  }
})();

describe('KmsgReader on a character device', () => {
  // /dev/null is one: the reader takes the device path, and the reads are scripted.
  it('reads records until nothing waits, counting EPIPE (records overwritten) and going on', () => {
    const script: Array<string | 'EPIPE' | null> = ['6,10,1000,-;first', 'EPIPE', '6,12,1200,-;second', null, '6,13,1300,-;next poll'];
    let calls = 0;
    const readNow = (_fd: number, buf: Buffer): number | null => {
      calls++;
      const next = script.shift();
      if (next === 'EPIPE') throw Object.assign(new Error('read: Broken pipe'), { code: 'EPIPE' });
      if (next === null || next === undefined) return null;
      return buf.write(next, 'latin1');
    };
    const { r, logs } = reader('/dev/null', { readNow });
    expect(r.poll()).toBe(2);
    expect(calls).toBe(4);
    expect(r.counters.overwritten).toBe(1);
    expect(r.lastSeq).toBe(12);
    expect(logs).toEqual([expect.stringMatching(/overwritten/)]);
    expect(r.poll()).toBe(1);
    expect(r.lastSeq).toBe(13);
    r.close();
  });
});

describe.skipIf(!canReadKmsg).each([
  ['node:fs', {}],
  ["the addon's readNow", { readNow: (fd: number, buf: Buffer) => loadNative().readNow(fd, buf) }],
])('KmsgReader on the real /dev/kmsg (read only), reading with %s', (_name, extra: Partial<KmsgOptions>) => {
  it('reads the kernel buffer from its start without throwing; ordinary lines emit nothing', () => {
    const { r, events, logs } = reader('/dev/kmsg', { path: undefined, ...extra });
    expect(r.path).toBe('/dev/kmsg');
    let total = 0;
    for (let i = 0; i < 50; i++) {
      const got = r.poll();
      total += got;
      if (got === 0) break;
    }
    expect(logs).toEqual([]);
    expect(r.active).toBe(true);
    expect(total).toBeGreaterThan(0);
    expect(r.lastSeq).toBeGreaterThanOrEqual(0);
    // The first records of the buffer are boot lines ("Linux version …"); only real OOM,
    // hung-task or segfault lines (if this machine ever had one) may have been reported.
    for (const e of events) expect(e.message).toMatch(/Killed process|oom-kill:|INFO: task|segfault at|unhandled exception|traps: /);
    // Cheap when nothing is new: one read that fails with EAGAIN.
    const t0 = performance.now();
    for (let i = 0; i < 200; i++) r.poll();
    expect((performance.now() - t0) / 200).toBeLessThan(1);
    r.close();
  });
});
