import { encode } from '@msgpack/msgpack';
import { describe, expect, it } from 'vitest';
import { helloMessage } from '../../test/support/hello.js';
import { decodeCollectorMessage, decodeProbeMessage, encodeMessage } from '../src/codec.js';
import { ProtocolError } from '../src/errors.js';
import { FrameDecoder, frame } from '../src/frame.js';
import {
  DUMP_CHUNK_BYTES,
  MAX_EVENTS_PER_BATCH,
  MAX_FIELDS,
  MAX_HELLO_FRAME_BYTES,
  MAX_NAME,
  MAX_NESTING_DEPTH,
  MAX_TEXT,
} from '../src/limits.js';
import type { CollectorMessage, ProbeMessage } from '../src/messages.js';

const status = {
  target: null,
  listener: { port: 49983, bound: false },
  phases: { reported: false, ready: false },
};

const hello: ProbeMessage = helloMessage();

const probeSamples: ProbeMessage[] = [
  hello,
  {
    type: 'events',
    events: [
      { kind: 'target.found', seq: 1, t: 10, pid: 42, name: 'envd', startedAt: 9, source: 'name' },
      { kind: 'phase', seq: 2, t: 11, name: 'cgroup-manager', status: 'envd startup: opening cgroup manager' },
      { kind: 'listener.bound', seq: 3, t: 12, port: 49983, address: '0.0.0.0', inode: 555, pid: 42 },
      { kind: 'target.exit', seq: 4, t: 13, pid: 42, exitCode: 1 },
    ],
  },
  { type: 'gap', from: 1, to: 9 },
  { type: 'result', id: 7, ok: true, status },
  { type: 'heartbeat', sinceBootMs: 99 },
];

const collectorSamples: CollectorMessage[] = [
  { type: 'welcome', ack: 3, hostWallMs: 1_700_000_000_000 },
  { type: 'ack', seq: 10 },
  { type: 'command', id: 1, op: 'status' },
  { type: 'heartbeat' },
];

function body(value: unknown): Uint8Array {
  return encode(value);
}

function codeOf(fn: () => unknown): string | undefined {
  try {
    fn();
  } catch (err) {
    if (err instanceof ProtocolError) return err.code;
    throw err;
  }
  return undefined;
}

describe('codec', () => {
  it('round-trips every probe and collector message through frames', () => {
    const out: unknown[] = [];
    const dec = new FrameDecoder((b) => out.push(decodeProbeMessage(b)));
    for (const m of probeSamples) dec.push(encodeMessage(m));
    expect(out).toEqual(probeSamples);

    const back: unknown[] = [];
    const dec2 = new FrameDecoder((b) => back.push(decodeCollectorMessage(b)));
    for (const m of collectorSamples) dec2.push(encodeMessage(m));
    expect(back).toEqual(collectorSamples);
  });

  it('rejects unknown message types with a stable code', () => {
    expect(codeOf(() => decodeProbeMessage(body({ type: 'teleport' })))).toBe('ERR_UNKNOWN_TYPE');
    // Direction matters: a probe may not send a collector's command.
    expect(codeOf(() => decodeProbeMessage(body({ type: 'command', id: 1, op: 'status' })))).toBe('ERR_UNKNOWN_TYPE');
    expect(codeOf(() => decodeCollectorMessage(body({ type: 'hello' })))).toBe('ERR_UNKNOWN_TYPE');
  });

  it('rejects unknown event kinds with their own code', () => {
    const m = { type: 'events', events: [{ kind: 'mind.control', seq: 1, t: 0 }] };
    expect(codeOf(() => decodeProbeMessage(body(m)))).toBe('ERR_UNKNOWN_KIND');
  });

  it('rejects wrong types and out-of-range values as ERR_SCHEMA', () => {
    const bad: unknown[] = [
      'just a string',
      [1, 2, 3],
      { type: 7 },
      { ...hello, generation: 'one' },
      { ...hello, generation: 0 },
      { ...hello, instanceId: 'short' },
      { ...hello, status: undefined },
      { type: 'ack', seq: -1 },
      { type: 'heartbeat', sinceBootMs: Number.NaN },
      { type: 'events', events: [{ kind: 'phase', seq: 1.5, t: 0 }] },
      { type: 'events', events: [{ kind: 'phase', seq: 1, t: 0, status: 'x'.repeat(MAX_TEXT + 1) }] },
      { type: 'events', events: [{ kind: 'listener.unbound', seq: 1, t: 0, port: 70000 }] },
    ];
    for (const v of bad) {
      const code = codeOf(() => decodeProbeMessage(body(v)));
      expect(code === 'ERR_SCHEMA' || code === 'ERR_UNKNOWN_TYPE', `${JSON.stringify(v).slice(0, 80)} gave ${code}`).toBe(true);
    }
    expect(codeOf(() => decodeProbeMessage(body({ ...hello, generation: 'one' })))).toBe('ERR_SCHEMA');
  });

  it('refuses, before building them, strings, binaries, arrays and maps longer than any schema allows', () => {
    const longest = { type: 'events', events: [{ kind: 'probe.notice', seq: 1, t: 0, level: 'warn', message: '\u20ac'.repeat(MAX_TEXT) }] };
    expect(decodeProbeMessage(body(longest))).toEqual(longest); // the longest text, all 3-byte UTF-8, is fine
    const tooMuch: unknown[] = [
      { type: 'heartbeat', sinceBootMs: 1, junk: 'x'.repeat(3 * MAX_TEXT + 1) },
      { type: 'dump.chunk', id: 1, index: 0, data: new Uint8Array(DUMP_CHUNK_BYTES + 1) },
      { type: 'events', events: new Array(MAX_EVENTS_PER_BATCH + 1).fill({ kind: 'phase', seq: 1, t: 0 }) },
      { type: 'heartbeat', sinceBootMs: 1, junk: Object.fromEntries(Array.from({ length: MAX_FIELDS + 1 }, (_, i) => [`k${i}`, i])) },
    ];
    for (const v of tooMuch) {
      expect(() => decodeProbeMessage(body(v))).toThrowError(
        expect.objectContaining({ code: 'ERR_MSGPACK', message: expect.stringMatching(/max|length/i) }),
      );
    }
  });

  it('rejects bytes that are not msgpack', () => {
    expect(codeOf(() => decodeProbeMessage(Buffer.from([0xc1])))).toBe('ERR_MSGPACK');
    expect(codeOf(() => decodeProbeMessage(Buffer.from([0x92, 0x01])))).toBe('ERR_MSGPACK');
  });

  it('drops unknown keys and never lets __proto__ through', () => {
    const raw = Buffer.from(encode({ type: 'ack', seq: 5, extra: 'ignored' }));
    expect(decodeCollectorMessage(raw)).toEqual({ type: 'ack', seq: 5 });
    // A hand-built map with a __proto__ key: either refused by the decoder or stripped.
    const evil = Buffer.from([
      0x83,
      0xa4,
      ...Buffer.from('type'),
      0xa3,
      ...Buffer.from('ack'),
      0xa3,
      ...Buffer.from('seq'),
      0x01,
      0xa9,
      ...Buffer.from('__proto__'),
      0x81,
      0xa5,
      ...Buffer.from('admin'),
      0xc3,
    ]);
    let parsed: unknown;
    try {
      parsed = decodeCollectorMessage(evil);
    } catch (err) {
      expect(err).toBeInstanceOf(ProtocolError);
    }
    if (parsed) expect((parsed as { admin?: boolean }).admin).toBeUndefined();
    expect(({} as { admin?: boolean }).admin).toBeUndefined();
  });

  it('fuzz: random and mutated bodies only ever fail with a ProtocolError', () => {
    let seed = 7;
    const rand = () => (seed = (seed * 1103515245 + 12345) & 0x7fffffff) / 0x7fffffff;
    const valid = probeSamples.map((m) => encodeMessage(m).subarray(4));
    for (let i = 0; i < 3000; i++) {
      let input: Buffer;
      if (i % 2 === 0) {
        input = Buffer.from(Array.from({ length: 1 + Math.floor(rand() * 64) }, () => Math.floor(rand() * 256)));
      } else {
        input = Buffer.from(valid[i % valid.length]!);
        for (let k = 0; k < 1 + Math.floor(rand() * 4); k++) input[Math.floor(rand() * input.length)] = Math.floor(rand() * 256);
      }
      try {
        decodeProbeMessage(input);
      } catch (err) {
        expect(err).toBeInstanceOf(ProtocolError);
      }
    }
  });

  it('decodes the deepest valid message, and refuses a body nested deeper than the limit before decoding it', () => {
    const keyframe = { ...status, sockets: { t: 1, tcpInUse: 1, timeWait: 0, top: [{ address: '169.254.169.254', port: 80, count: 3 }] } };
    const deepest: ProbeMessage = { type: 'events', events: [{ kind: 'keyframe', seq: 1, t: 1, status: keyframe }] };
    expect(decodeProbeMessage(encodeMessage(deepest).subarray(4))).toEqual(deepest);

    // Unknown keys are dropped after decoding, so only the depth check stops this one.
    let nested: unknown = 1;
    for (let d = 1; d < MAX_NESTING_DEPTH; d++) nested = [nested];
    expect(decodeProbeMessage(body({ ...hello, extra: nested }))).toEqual(hello); // depth MAX_NESTING_DEPTH
    expect(codeOf(() => decodeProbeMessage(body({ ...hello, extra: [nested] })))).toBe('ERR_MSGPACK');

    const million = Buffer.alloc(1024 * 1024, 0x91);
    million[million.length - 1] = 0xc0;
    expect(() => decodeProbeMessage(million)).toThrowError(
      expect.objectContaining({ code: 'ERR_MSGPACK', message: `nested deeper than ${MAX_NESTING_DEPTH}` }),
    );
  });

  it('the largest hello the schema allows fits the frame limit before hello', () => {
    // Every optional field present, every string at its bound in 3-byte UTF-8, every number a float 64.
    const t = (n: number, c = '\u20ac') => c.repeat(n);
    const big = Number.MAX_SAFE_INTEGER;
    const f = 1e13 - 0.5;
    const largest = {
      type: 'hello',
      protocol: 0xffff,
      probeVersion: t(64),
      instanceId: t(64),
      generation: big,
      bootId: t(64),
      clocks: { wallMs: f, sinceBootMs: f },
      lastSeq: big,
      config: { target: t(MAX_NAME), expectPort: 65535, pprof: true },
      status: {
        target: {
          pid: 0x3fffffff,
          name: t(MAX_NAME),
          startedAt: f,
          source: 'pidfile',
          alive: true,
          exitCode: 255,
          signal: t(16),
          threads: big,
          rssKb: big,
        },
        listener: { port: 65535, bound: true, since: f, address: t(64), pid: 0x3fffffff, acceptQueue: big, queuedSince: f },
        health: { url: t(256), t: f, ok: true, status: 599, latencyMs: 1e7 - 0.5, error: t(256) },
        sockets: {
          t: f,
          tcpInUse: big,
          timeWait: big,
          remotesDistinct: big,
          censusAt: f,
          byState: Object.fromEntries(Array.from({ length: 16 }, (_, i) => [t(16, String.fromCharCode(0x4e00 + i)), big])),
          top: Array.from({ length: 20 }, () => ({ address: t(64), port: 65535, count: big })),
        },
        system: {
          t: f,
          uptimeMs: f,
          load: [1e6 - 0.5, 1e6 - 0.5, 1e6 - 0.5],
          memTotalKb: big,
          memAvailableKb: big,
          bootId: t(64),
          wallMs: f,
        },
        probe: { listenerSource: 'sock_diag', fallbackReason: t(MAX_TEXT) },
        phases: { reported: true, last: { name: t(MAX_NAME), status: t(MAX_TEXT), t: f }, ready: true, readyAt: f },
      },
    };
    const decoded = decodeProbeMessage(body(largest));
    expect(decoded).toEqual(largest); // every field above is one the schema knows
    const framed = encodeMessage(decoded);
    expect(framed.length - 4).toBeGreaterThan(30 * 1024); // the bound below is not vacuous
    expect(framed.length - 4).toBeLessThanOrEqual(MAX_HELLO_FRAME_BYTES);
  });

  it('a frame carrying a valid message after garbage is never reached', () => {
    const seen: unknown[] = [];
    const dec = new FrameDecoder((b) => seen.push(decodeProbeMessage(b)));
    expect(() => dec.push(Buffer.concat([frame(Buffer.from([0xc1])), encodeMessage(hello)]))).toThrow(ProtocolError);
    expect(seen).toHaveLength(0);
  });
});

describe('heartbeats, in bytes made by hand', () => {
  const body = (m: ProbeMessage | CollectorMessage) => encodeMessage(m).subarray(4);

  it('are the msgpack the general encoder writes, and decode to the same message either way', () => {
    expect(body({ type: 'heartbeat' })).toEqual(Buffer.from(encode({ type: 'heartbeat' })));
    for (const sinceBootMs of [0, 0.5, 1, 99, 123_456.789, 2 ** 40 + 0.25, 1e13]) {
      const m: ProbeMessage = { type: 'heartbeat', sinceBootMs };
      const mine = body(m);
      // A float 64 where the general encoder may write an integer: the same number.
      expect(mine.subarray(0, -9)).toEqual(Buffer.from(encode({ type: 'heartbeat', sinceBootMs: 0.5 })).subarray(0, -9));
      expect(decodeProbeMessage(mine)).toEqual(m);
      expect(decodeProbeMessage(encode(m))).toEqual(m);
    }
    expect(decodeCollectorMessage(body({ type: 'heartbeat' }))).toEqual({ type: 'heartbeat' });
  });

  it('still meet the schema: out-of-range numbers and the wrong direction are refused as before', () => {
    for (const sinceBootMs of [-1, 1e14, Number.NaN, Number.POSITIVE_INFINITY]) {
      const mine = body({ type: 'heartbeat', sinceBootMs });
      expect(() => decodeProbeMessage(mine)).toThrow(expect.objectContaining({ code: 'ERR_SCHEMA' }));
      expect(() => decodeProbeMessage(encode({ type: 'heartbeat', sinceBootMs }))).toThrow(ProtocolError);
    }
    // The collector's heartbeat carries no time: from a probe it is missing one.
    expect(() => decodeProbeMessage(body({ type: 'heartbeat' }))).toThrow(expect.objectContaining({ code: 'ERR_SCHEMA' }));
    // Extra bytes after a heartbeat are not a heartbeat: the general decoder says what they are.
    const longer = Buffer.concat([body({ type: 'heartbeat', sinceBootMs: 1 }), Buffer.from([0xc0])]);
    expect(() => decodeProbeMessage(longer)).toThrow(expect.objectContaining({ code: 'ERR_MSGPACK' }));
  });
});
