import { describe, expect, it } from 'vitest';
import { MAX_LOG_LINES_PER_BATCH, eventSchema, type EventBody } from '@vsockdiag/proto';
import { LogWatcher } from '../src/logs/log-watcher.js';
import { DEFAULT_PHASE_PATTERN, compilePhasePattern } from '../src/logs/phase-pattern.js';

function setup(opts: { tailLines?: number; maxLinesPerSecond?: number; maxPhasesPerSecond?: number } = {}) {
  const events: EventBody[] = [];
  let now = 1000;
  const w = new LogWatcher({
    pattern: compilePhasePattern(DEFAULT_PHASE_PATTERN),
    emit: (e) => {
      // every event must pass the protocol schema the probe checks before the ring
      eventSchema.parse({ ...e, seq: 1, t: 0 });
      events.push(e);
    },
    now: () => now,
    ...opts,
  });
  return {
    w,
    events,
    advance: (ms: number) => (now += ms),
    ofKind: <K extends EventBody['kind']>(kind: K) => events.filter((e): e is Extract<EventBody, { kind: K }> => e.kind === kind),
  };
}

const lines = (from: number, n: number, prefix = 'line') =>
  Buffer.from(Array.from({ length: n }, (_, i) => `${prefix} ${from + i}\n`).join(''));

describe('LogWatcher', () => {
  it('emits phases at once, other lines at flush', () => {
    const { w, events, ofKind } = setup();
    const err = w.input('stderr');
    err.feed(Buffer.from('hello\nenvd startup: creating cgroup manager\nenvd startup: binding HTTP'));
    expect(events).toEqual([
      { kind: 'phase', source: 'log', name: 'creating cgroup manager', status: 'envd startup: creating cgroup manager' },
    ]);
    err.end(); // the final partial line is a line too
    expect(ofKind('phase')).toHaveLength(2);
    expect(ofKind('phase')[1]!.name).toBe('binding HTTP');
    expect(ofKind('log.lines')).toHaveLength(0);
    w.flush();
    expect(ofKind('log.lines')).toEqual([
      {
        kind: 'log.lines',
        stream: 'stderr',
        lines: ['hello', 'envd startup: creating cgroup manager', 'envd startup: binding HTTP'],
      },
    ]);
    // nothing pending: flush emits nothing
    const n = events.length;
    w.flush();
    expect(events.length).toBe(n);
    expect(w.counters).toMatchObject({ lines: 3, phases: 2, sent: 3, dropped: 0, batches: 1 });
  });

  it('one batch per stream, the same writer per stream', () => {
    const { w, ofKind } = setup();
    expect(w.input('stdout')).toBe(w.input('stdout'));
    w.input('stdout').feed(Buffer.from('o1\no2\n'));
    w.input('stderr').feed(Buffer.from('e1\n'));
    w.input('file').feed(Buffer.from('f1\n'));
    w.input('journal').feed(Buffer.from('j1\n'));
    w.flush();
    const batches = ofKind('log.lines');
    expect(batches.map((b) => [b.stream, b.lines])).toEqual([
      ['stdout', ['o1', 'o2']],
      ['stderr', ['e1']],
      ['file', ['f1']],
      ['journal', ['j1']],
    ]);
  });

  it('keeps a bounded tail of the last lines, all streams in order', () => {
    const { w } = setup({ tailLines: 5 });
    expect(w.tail()).toEqual([]);
    w.input('stdout').feed(lines(0, 3, 'out'));
    expect(w.tail().map((t) => t.line)).toEqual(['out 0', 'out 1', 'out 2']);
    w.input('stderr').feed(lines(0, 4, 'err'));
    expect(w.tail().map((t) => `${t.stream}:${t.line}`)).toEqual([
      'stdout:out 2',
      'stderr:err 0',
      'stderr:err 1',
      'stderr:err 2',
      'stderr:err 3',
    ]);
    // the tail takes lines beyond any rate limit
    w.input('stdout').feed(lines(0, 10_000));
    expect(w.tail().map((t) => t.line)).toEqual(['line 9995', 'line 9996', 'line 9997', 'line 9998', 'line 9999']);
  });

  it('batches hold at most MAX_LOG_LINES_PER_BATCH lines and count the rest as dropped', () => {
    const { w, ofKind, advance } = setup({ maxLinesPerSecond: 1_000_000 });
    const out = w.input('stdout');
    // 500 lines spread over several seconds but one flush (a late flush): the batch is full
    for (let i = 0; i < 5; i++) {
      out.feed(lines(i * 100, 100));
      advance(1000);
    }
    w.flush();
    const [batch] = ofKind('log.lines');
    expect(batch!.lines).toHaveLength(MAX_LOG_LINES_PER_BATCH);
    expect(batch!.lines[0]).toBe('line 0');
    expect(batch!.dropped).toBe(500 - MAX_LOG_LINES_PER_BATCH);
    expect(w.counters).toMatchObject({ lines: 500, sent: 200, dropped: 300 });
  });

  it('rate-limits lines per second and stream', () => {
    const { w, ofKind, advance } = setup({ maxLinesPerSecond: 50 });
    const out = w.input('stdout');
    const err = w.input('stderr');
    out.feed(lines(0, 120));
    err.feed(lines(0, 10, 'err'));
    w.flush();
    let batches = ofKind('log.lines');
    expect(batches[0]).toMatchObject({ stream: 'stdout', dropped: 70 });
    expect(batches[0]!.lines).toHaveLength(50);
    expect(batches[0]!.lines.at(-1)).toBe('line 49');
    expect(batches[1]).toEqual({ kind: 'log.lines', stream: 'stderr', lines: lines(0, 10, 'err').toString().trim().split('\n') });
    // same second: still over budget
    advance(500);
    out.feed(lines(120, 5));
    w.flush();
    batches = ofKind('log.lines');
    expect(batches[2]).toEqual({ kind: 'log.lines', stream: 'stdout', lines: [], dropped: 5 });
    // the next second has a fresh budget
    advance(600);
    out.feed(lines(125, 5));
    w.flush();
    expect(ofKind('log.lines')[3]).toEqual({
      kind: 'log.lines',
      stream: 'stdout',
      lines: ['line 125', 'line 126', 'line 127', 'line 128', 'line 129'],
    });
  });

  it('phases are not lost to the line budget, but are limited to 50 a second', () => {
    const { w, ofKind, advance } = setup({ maxLinesPerSecond: 10 });
    const err = w.input('stderr');
    err.feed(lines(0, 100, 'noise'));
    err.feed(Buffer.from('envd startup: after the noise\n'));
    expect(ofKind('phase').map((p) => p.name)).toEqual(['after the noise']);

    err.feed(lines(0, 80, 'envd startup: step'));
    expect(ofKind('phase')).toHaveLength(50);
    expect(w.counters.phasesDropped).toBe(31);
    w.flush();
    const notice = ofKind('probe.notice');
    expect(notice).toHaveLength(1);
    expect(notice[0]!.message).toMatch(/^31 log lines matching the phase pattern over 50\/s/);
    advance(1000);
    err.feed(Buffer.from('envd startup: later\n'));
    expect(ofKind('phase').at(-1)!.name).toBe('later');
    w.flush();
    expect(ofKind('probe.notice')).toHaveLength(1);
  });

  it('a 10 MB line and binary output become bounded, schema-valid events', () => {
    const { w, ofKind } = setup();
    const out = w.input('stdout');
    const big = Buffer.alloc(64 * 1024, 0x41);
    for (let i = 0; i < 160; i++) out.feed(big);
    out.feed(Buffer.from([0x0a, 0x00, 0xff, 0xc3, 0x0a]));
    w.flush();
    const [batch] = ofKind('log.lines');
    expect(batch!.lines).toEqual(['A'.repeat(2048), '\ufffd\ufffd\ufffd']);
    expect(w.counters.cut).toBe(1);
    expect(w.counters.bytes).toBe(160 * 64 * 1024 + 5);
  });

  it('tick() flushes about once per second, whatever the tick rate', () => {
    const { w, ofKind, advance } = setup();
    const out = w.input('stdout');
    for (let i = 0; i < 60; i++) {
      out.feed(Buffer.from(`l${i}\n`));
      advance(40); // boot-rate ticks
      w.tick();
    }
    // 2400 ms of ticks: flushed at 1000 and 2000 ms
    const batches = ofKind('log.lines');
    expect(batches).toHaveLength(2);
    expect(batches[0]!.lines).toHaveLength(25);
    expect(batches[0]!.lines[0]).toBe('l0');
    w.flush();
    expect(ofKind('log.lines').flatMap((b) => b.lines)).toHaveLength(60);
  });

  it('emits a phase at the time its stream was stamped with, and at "now" without a stamp', () => {
    const times: Array<number | undefined> = [];
    const w = new LogWatcher({ pattern: compilePhasePattern(DEFAULT_PHASE_PATTERN), emit: (e, t) => e.kind === 'phase' && times.push(t) });
    w.stamp('journal', 1234.5);
    w.input('journal').feed(Buffer.from('envd startup: creating logger\n'));
    w.stamp('journal', 2000);
    w.input('journal').feed(Buffer.from('envd startup: creating HTTP router\n'));
    w.input('stderr').feed(Buffer.from('envd startup: mounting filesystem RPC service\n'));
    expect(times).toEqual([1234.5, 2000, undefined]);
  });
});
