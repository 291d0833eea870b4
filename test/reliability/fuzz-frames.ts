// What the fuzzer sends: valid frames with values at and around every bound (random event
// kinds, strings of any script, XSS payloads, extreme numbers), and hostile frames made from
// them: bit flips, overwritten bytes, swapped fields, wrong types, random bodies,
// truncations, oversized or zero length prefixes, deep nesting, huge strings, arrays and
// maps, unknown types and kinds, and valid messages at the wrong moment. Each hostile frame
// comes with what the collector must do with it, found by the same decoder the collector
// runs and the session's rules, so the fuzzer checks outcomes, not only survival.

import {
  DUMP_CHUNK_BYTES,
  FRAME_HEADER_BYTES,
  MAX_EVENTS_PER_BATCH,
  MAX_FIELDS,
  MAX_FRAME_BYTES,
  MAX_HELLO_FRAME_BYTES,
  MAX_LOG_LINE,
  MAX_NAME,
  MAX_NESTING_DEPTH,
  MAX_TEXT,
  decodeProbeMessage,
  encodeMessage,
  frame,
  type EventBody,
  type ProbeEvent,
  type ProbeMessage,
} from '@vsockdiag/proto';
import { helloMessage } from '../support/hello.js';
import type { Prng } from '../support/prng.js';

export const HOSTILE_CLASSES = [
  'bitflip',
  'bytes',
  'swap',
  'type',
  'random',
  'truncate',
  'prefix',
  'deep',
  'huge',
  'unknown',
  'moment',
  'hello',
] as const;
export type HostileClass = (typeof HOSTILE_CLASSES)[number];

const PAYLOADS = [
  '<img src=x onerror=alert(1)>',
  'javascript:alert(1)',
  '"><script>alert(1)</script>',
  '\u0000\u0001\u001b[31m',
  '__proto__',
  'constructor',
  '../../etc/passwd',
  '%s%n%x',
  '\u202e\u2066',
];
const ALPHABETS = ['abcxyz019 _-.:/', 'äöüßéèêñ', '€₹ツ漢字한글', '\u{1f600}\u{1f4a9}\u{10348}', '\t\n\r\u0085\u2028\u2029'];

/** Whether values go to their bounds (long strings, many fields, full batches) or stay small:
 *  most frames are small, so a run spends its time on many hostile frames, not on storing. */
let rich = false;

/** A string of at most `max` UTF-16 units: empty, short, a payload, or (rich) at the bound. */
export function str(r: Prng, max: number): string {
  const roll = r.float();
  if (roll < 0.1) return '';
  if (roll < 0.2) return r.pick(PAYLOADS).slice(0, max);
  const len = rich && roll < 0.5 ? max : r.int(1, Math.min(max, rich ? 256 : 16));
  const alphabet = [...r.pick(ALPHABETS)];
  let unit = '';
  for (let i = 0; i < 16; i++) unit += r.pick(alphabet);
  const out = unit.repeat(Math.ceil(len / unit.length)).slice(0, len);
  // An astral character is two units: never end on the first half of one.
  const last = out.charCodeAt(out.length - 1);
  return last >= 0xd800 && last <= 0xdbff ? out.slice(0, -1) : out;
}

const intIn = (r: Prng, lo: number, hi: number) => (r.chance(0.3) ? r.pick([lo, hi]) : r.int(lo, Math.min(hi, lo + 100_000)));
const ms = (r: Prng) => (r.chance(0.2) ? r.pick([0, 1e13]) : r.float() * 1e7);

/** One valid event body of a random kind. */
export function eventBody(r: Prng): EventBody {
  switch (r.int(0, 8)) {
    case 0:
      return {
        kind: 'phase',
        ...(r.chance(0.8) ? { name: str(r, MAX_NAME) } : {}),
        ...(r.chance(0.5) ? { status: str(r, MAX_TEXT) } : {}),
        ...(r.chance(0.3) ? { ready: r.chance(0.5) } : {}),
        ...(r.chance(0.3)
          ? {
              fields: Object.fromEntries(
                Array.from({ length: r.int(0, rich ? MAX_FIELDS : 3) }, (_, i) => [`${str(r, 32)}${i}`, str(r, 128)]),
              ),
            }
          : {}),
      };
    case 1:
      return { kind: 'probe.notice', level: r.pick(['info', 'warn'] as const), message: str(r, MAX_TEXT) };
    case 2:
      return {
        kind: 'log.lines',
        stream: r.pick(['stdout', 'stderr', 'file', 'journal'] as const),
        lines: Array.from({ length: r.int(0, rich ? 200 : 3) }, () => str(r, MAX_LOG_LINE)),
        ...(r.chance(0.3) ? { dropped: intIn(r, 0, Number.MAX_SAFE_INTEGER) } : {}),
      };
    case 3:
      return { kind: 'sockets', tcpInUse: intIn(r, 0, 1e9), timeWait: intIn(r, 0, 1e9) };
    case 4:
      return {
        kind: 'target.sample',
        pid: intIn(r, 1, 0x3fffffff),
        state: str(r, 1),
        threads: intIn(r, 0, 1e6),
        rssKb: intIn(r, 0, 1e12),
        fds: r.chance(0.2) ? null : intIn(r, 0, 1e6),
        cpuMs: intIn(r, 0, 1e12),
      };
    case 5:
      return { kind: 'listener.queue', port: intIn(r, 0, 65535), acceptQueue: intIn(r, 0, 1e6) };
    case 6:
      return {
        kind: 'kernel',
        what: r.pick(['oom', 'hung-task', 'segfault'] as const),
        message: str(r, MAX_TEXT),
        ...(r.chance(0.5) ? { process: str(r, MAX_NAME) } : {}),
      };
    case 7:
      return {
        kind: 'health',
        url: str(r, 256),
        ok: r.chance(0.5),
        latencyMs: r.float() * 1e7,
        ...(r.chance(0.5) ? { error: str(r, 256) } : {}),
      };
    default:
      return {
        kind: 'system',
        uptimeMs: ms(r),
        load: Array.from({ length: r.int(0, 3) }, () => r.float() * 1e6),
        memTotalKb: intIn(r, 0, 1e12),
        memAvailableKb: intIn(r, 0, 1e12),
        bootId: str(r, 64),
        wallMs: ms(r),
      };
  }
}

/** A connection's state as the collector's session keeps it: the next seq it expects. */
export interface Lane {
  lastSeq: number;
}

/** One valid frame after hello (events in order, heartbeats, gaps, stray dump chunks and
 *  results); one in a hundred goes to the bounds. */
export function validMessage(r: Prng, lane: Lane): ProbeMessage {
  rich = r.chance(0.01);
  const roll = r.float();
  if (roll < 0.2) {
    // Bounds: either a full batch of small events, or a few events at their bounds.
    const full = rich && r.chance(0.5);
    if (full) rich = false;
    const n = full ? r.int(MAX_EVENTS_PER_BATCH - 8, MAX_EVENTS_PER_BATCH) : r.int(1, 4);
    const events = Array.from({ length: n }, (_, i) => ({ ...eventBody(r), seq: lane.lastSeq + 1 + i, t: ms(r) }) as ProbeEvent);
    const m: ProbeMessage = { type: 'events', events };
    // A batch that would not fit a frame is sent as a heartbeat instead.
    if (rich && encodeMessage(m).length > MAX_FRAME_BYTES) return { type: 'heartbeat', sinceBootMs: ms(r) };
    lane.lastSeq += n;
    return m;
  }
  if (roll < 0.85) return { type: 'heartbeat', sinceBootMs: ms(r) };
  if (roll < 0.9) {
    const to = lane.lastSeq + r.int(1, 1000);
    const m: ProbeMessage = { type: 'gap', from: lane.lastSeq + 1, to };
    lane.lastSeq = to;
    return m;
  }
  if (roll < 0.95)
    return { type: 'dump.chunk', id: intIn(r, 1, 1e9), index: intIn(r, 0, 1e6), data: r.bytes(r.int(0, rich ? DUMP_CHUNK_BYTES : 256)) };
  return { type: 'result', id: intIn(r, 1, 1e9), ok: r.chance(0.5), ...(r.chance(0.5) ? { error: str(r, MAX_TEXT) } : {}) };
}

/** A hello that passes the schema, with a fresh instance id (so its ack floor is 0). */
export function validHello(r: Prng, n: number): ProbeMessage {
  return helloMessage({
    instanceId: `fuzz${String(n).padStart(12, '0')}`,
    generation: r.int(1, 1e6),
    bootId: str(r, 64),
    probeVersion: str(r, 64),
    clocks: { wallMs: ms(r), sinceBootMs: ms(r) },
  });
}

/** What the collector must do with a hostile frame. */
export type Expect = 'close' | 'continue';

export interface Hostile {
  cls: HostileClass;
  /** The bytes to write (a whole frame, or a partial one for truncations). */
  bytes: Buffer;
  /** End our side right after writing (a truncated stream). */
  endAfter: boolean;
  expect: Expect;
}

/** A path to a value inside a decoded message, and the containers along it. */
function paths(v: unknown, prefix: Array<string | number> = [], out: Array<Array<string | number>> = []): Array<Array<string | number>> {
  if (prefix.length > 0) out.push(prefix);
  if (Array.isArray(v)) v.slice(0, 8).forEach((x, i) => paths(x, [...prefix, i], out));
  else if (v && typeof v === 'object' && !(v instanceof Uint8Array))
    for (const k of Object.keys(v)) paths((v as Record<string, unknown>)[k], [...prefix, k], out);
  return out;
}

function getAt(root: any, p: Array<string | number>): unknown {
  return p.reduce((o, k) => o?.[k], root);
}

function setAt(root: any, p: Array<string | number>, value: unknown): void {
  const parent = getAt(root, p.slice(0, -1)) as any;
  if (parent && typeof parent === 'object') parent[p[p.length - 1]!] = value;
}

function wrongValue(r: Prng): unknown {
  return r.pick<() => unknown>([
    () => null,
    () => true,
    () => -1,
    () => 2 ** 53 + 2,
    () => 1.5,
    () => Number.NaN,
    () => Number.POSITIVE_INFINITY,
    () => 'x',
    () => [],
    () => ({}),
    () => new Uint8Array(3),
    () => [[[1]]],
    () => ({ type: 'hello' }),
    () => r.pick(PAYLOADS),
  ])();
}

/** `depth` one-element arrays (or one-entry maps) inside each other, as raw msgpack: no
 *  recursion to build or encode it. */
function deepBody(depth: number, asMap: boolean): Buffer {
  const unit = Buffer.from(asMap ? [0x81, 0xa1, 0x6b] : [0x91]); // {"k": …} or [ … ]
  const out = Buffer.alloc(depth * unit.length + 1, unit);
  out[depth * unit.length] = 0xc0; // nil at the bottom
  return out;
}

/** Whether the collector's session must close on `body` (what session.ts and the decoder do). */
export function mustClose(body: Uint8Array, lane: Lane): boolean {
  let m: ProbeMessage;
  try {
    m = decodeProbeMessage(body);
  } catch {
    return true;
  }
  switch (m.type) {
    case 'hello':
      return true; // a second hello
    case 'events':
      return m.events.some((e, i) => e.seq !== lane.lastSeq + 1 + i);
    case 'gap':
      return m.from !== lane.lastSeq + 1 || m.to < m.from;
    default:
      return false;
  }
}

/** After a frame the collector took: its session's seq moves as session.ts moves it. */
export function advance(body: Uint8Array, lane: Lane): void {
  const m = decodeProbeMessage(body);
  if (m.type === 'events' && m.events.length > 0) lane.lastSeq = m.events[m.events.length - 1]!.seq;
  if (m.type === 'gap') lane.lastSeq = m.to;
}

const bodyOf = (m: ProbeMessage) => encodeMessage(m).subarray(FRAME_HEADER_BYTES);
/** Any value as a msgpack body (the encoder does not validate: that is the point). */
const encode = (v: unknown) => bodyOf(v as ProbeMessage);

/** One hostile frame of class `cls`, sent after the hello (except class 'hello', which is the
 *  first frame). `lane` is the session's state before it. */
export function hostile(r: Prng, cls: HostileClass, lane: Lane, n: number): Hostile {
  const close = (bytes: Buffer, endAfter = false): Hostile => ({ cls, bytes, endAfter, expect: 'close' });
  const judged = (body: Buffer): Hostile => ({
    cls,
    bytes: frame(body),
    endAfter: false,
    expect: body.length > MAX_FRAME_BYTES || mustClose(body, lane) ? 'close' : 'continue',
  });
  const base = () => Buffer.from(bodyOf(validMessage(r, { ...lane })));
  /** A valid message as a plain value, to be changed before it is encoded. */
  const value = () => structuredClone(validMessage(r, { ...lane })) as unknown as Record<string, unknown>;
  switch (cls) {
    case 'bitflip': {
      const b = base();
      for (let k = r.int(1, 8); k > 0; k--) b[r.int(0, b.length - 1)]! ^= 1 << r.int(0, 7);
      return judged(b);
    }
    case 'bytes': {
      const b = base();
      for (let k = r.int(1, 4); k > 0; k--) b[r.int(0, b.length - 1)] = r.int(0, 255);
      return judged(b);
    }
    case 'swap':
    case 'type': {
      const v = value();
      const ps = paths(v);
      if (cls === 'swap' && ps.length >= 2) {
        const a = r.pick(ps);
        const b = r.pick(ps);
        const va = structuredClone(getAt(v, a));
        setAt(v, a, structuredClone(getAt(v, b)));
        setAt(v, b, va);
      } else setAt(v, r.pick(ps), wrongValue(r));
      return judged(Buffer.from(encode(v)));
    }
    case 'random':
      return judged(r.bytes(r.int(1, r.chance(0.1) ? 256 * 1024 : 512)));
    case 'truncate': {
      const whole = encodeMessage(validMessage(r, { ...lane }));
      return close(whole.subarray(0, r.int(1, whole.length - 1)), true);
    }
    case 'prefix': {
      const h = Buffer.alloc(FRAME_HEADER_BYTES);
      h.writeUInt32BE(r.chance(0.2) ? 0 : r.int(MAX_FRAME_BYTES + 1, 0xffffffff));
      return close(Buffer.concat([h, r.bytes(r.int(0, 64))]));
    }
    case 'deep': {
      const depth = r.chance(0.5) ? MAX_NESTING_DEPTH + r.int(0, 3) : r.int(MAX_NESTING_DEPTH, 200_000);
      // Inside a heartbeat, so only the depth is wrong: {type, sinceBootMs, x: <deep>}.
      const head = Buffer.from(encode({ type: 'heartbeat', sinceBootMs: 1 }));
      head[0] = 0x83; // one more entry: the key 'x' and the nested value
      return judged(Buffer.concat([head, Buffer.from([0xa1, 0x78]), deepBody(depth, r.chance(0.5))]));
    }
    case 'huge': {
      const v = value();
      const p = r.pick(paths(v));
      const kind = r.int(0, 3);
      const big =
        kind === 0
          ? 'x'.repeat(r.int(3 * MAX_TEXT, 900 * 1024))
          : kind === 1
            ? new Array(r.int(MAX_EVENTS_PER_BATCH + 1, 60_000)).fill(null)
            : kind === 2
              ? Object.fromEntries(Array.from({ length: r.int(MAX_FIELDS + 1, 5000) }, (_, i) => [`k${i}`, i]))
              : new Uint8Array(r.int(DUMP_CHUNK_BYTES + 1, 900 * 1024));
      setAt(v, p, big);
      return judged(Buffer.from(encode(v)));
    }
    case 'unknown': {
      const v = value();
      if (v.type === 'events' && Array.isArray(v.events) && r.chance(0.5))
        (v.events[0] as Record<string, unknown>).kind = str(r, 32) || 'x';
      else v.type = r.pick(['pwn', 'welcome', 'ack', 'command', '', 'HELLO', str(r, 64)]);
      return judged(Buffer.from(encode(v)));
    }
    case 'moment': {
      const pickOne = r.int(0, 2);
      if (pickOne === 0) return judged(bodyOf(validHello(r, n)));
      if (pickOne === 1) {
        const skip = r.pick([0, 2, -1, 1000]);
        return judged(bodyOf({ type: 'events', events: [{ kind: 'phase', seq: Math.max(1, lane.lastSeq + skip), t: 1 }] }));
      }
      return judged(bodyOf({ type: 'gap', from: lane.lastSeq + r.int(2, 9), to: lane.lastSeq + 1 }));
    }
    case 'hello': {
      // The first frame itself: a mutated hello, before the collector knows who this is.
      const hello = validHello(r, n);
      const b = Buffer.from(bodyOf(hello));
      const mode = r.int(0, 2);
      if (mode === 0) for (let k = r.int(1, 6); k > 0; k--) b[r.int(0, b.length - 1)]! ^= 1 << r.int(0, 7);
      else if (mode === 1) {
        const h = Buffer.alloc(FRAME_HEADER_BYTES);
        h.writeUInt32BE(r.int(MAX_HELLO_FRAME_BYTES + 1, MAX_FRAME_BYTES));
        return close(Buffer.concat([h, r.bytes(r.int(0, 1024))]));
      } else {
        const v = structuredClone(hello) as unknown as Record<string, unknown>;
        setAt(v, r.pick(paths(v)), wrongValue(r));
        const body = Buffer.from(encode(v));
        return { cls, bytes: frame(body), endAfter: false, expect: helloCloses(body) ? 'close' : 'continue' };
      }
      return { cls, bytes: frame(b), endAfter: false, expect: helloCloses(b) ? 'close' : 'continue' };
    }
  }
}

/** Whether a first frame closes the connection: not a hello the schema and version take. */
function helloCloses(body: Uint8Array): boolean {
  if (body.length > MAX_HELLO_FRAME_BYTES) return true;
  try {
    const m = decodeProbeMessage(body);
    return m.type !== 'hello' || m.protocol !== 1;
  } catch {
    return true;
  }
}
