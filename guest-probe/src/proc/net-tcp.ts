/**
 * /proc/net/tcp and /proc/net/tcp6 parsing.
 *
 * COST: the kernel formats every socket of the network namespace on each read (≈22–25 ms at
 * 5,000 sockets, almost all of it kernel time, whatever filter is passed here). This is the
 * fallback / diagnostic path; the per-tick listener check is the native inet_diag LISTEN query
 * and socket totals come from /proc/net/sockstat (system.ts). The filter here only avoids
 * building objects and address strings for lines that do not match.
 *
 * Format (one line per socket, after a header line):
 *   "   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000 0 12345 …"
 *    sl   local:port     remote:port   st tx_queue:rx_queue tr:tm->when retrnsmt  uid timeout inode
 * Addresses are printed as 32-bit words in host byte order (little-endian on x86_64/aarch64,
 * the only hosts supported), ports and the rest in plain hex, uid/timeout/inode in decimal.
 */
import { procBuffer, readProcInto } from './read.js';
import { cursor, hexDigit, parseDec, parseHex, skipBlanks, skipToken, lineEnd } from './scan.js';

/** TCP states as numbered by the kernel (include/net/tcp_states.h). */
export const TcpState = {
  ESTABLISHED: 1,
  SYN_SENT: 2,
  SYN_RECV: 3,
  FIN_WAIT1: 4,
  FIN_WAIT2: 5,
  TIME_WAIT: 6,
  CLOSE: 7,
  CLOSE_WAIT: 8,
  LAST_ACK: 9,
  LISTEN: 10,
  CLOSING: 11,
} as const;

/** State number → name (1 ESTABLISHED … 10 LISTEN, 11 CLOSING). */
export const TCP_STATE_NAMES: ReadonlyMap<number, string> = new Map(Object.entries(TcpState).map(([name, num]) => [num, name] as const));

export interface TcpSocketFilter {
  /** Keep only these states (e.g. new Set([TcpState.LISTEN])). */
  states?: ReadonlySet<number>;
  /** Keep only sockets bound to this local port. */
  localPort?: number;
}

export interface TcpSocketEntry {
  family: 4 | 6;
  /** Dotted IPv4, or compressed IPv6 (RFC 5952; IPv4-mapped as ::ffff:a.b.c.d). */
  localAddress: string;
  localPort: number;
  remoteAddress: string;
  remotePort: number;
  /** Kernel state number; see TcpState / TCP_STATE_NAMES. */
  state: number;
  /**
   * Bytes sent but not yet acknowledged (write_seq - snd_una). For LISTEN sockets this is 0 in
   * /proc/net/tcp (unlike `ss`, which shows the backlog limit there).
   */
  txQueue: number;
  /**
   * For connected sockets: bytes received but not yet read by the application.
   * For LISTEN sockets: the CURRENT ACCEPT-QUEUE LENGTH (sk_ack_backlog) — connections
   * completed by the kernel and waiting for accept(). A listener whose rxQueue stays above 0
   * is not accepting.
   */
  rxQueue: number;
  /** Socket inode (matches the `socket:[inode]` fd link); 0 for TIME_WAIT and request sockets. */
  inode: number;
  uid: number;
}

/**
 * Reads /proc/net/tcp and /proc/net/tcp6 (procRoot/net/…, i.e. the network namespace of the
 * calling thread when procRoot is '/proc') and returns the sockets that pass `filter`.
 * A missing file (e.g. IPv6 disabled) contributes nothing; malformed lines are skipped.
 */
export function readTcpSockets(filter: TcpSocketFilter = {}, procRoot = '/proc'): TcpSocketEntry[] {
  const out: TcpSocketEntry[] = [];
  scanFile(`${procRoot}/net/tcp`, 4, filter, out);
  scanFile(`${procRoot}/net/tcp6`, 6, filter, out);
  return out;
}

function scanFile(path: string, family: 4 | 6, filter: TcpSocketFilter, out: TcpSocketEntry[]): void {
  const n = readProcInto(path);
  if (n < 0) return;
  const buf = procBuffer();
  const states = filter.states;
  const wantPort = filter.localPort;
  const addrLen = family === 4 ? 8 : 32;

  let ls = 0;
  while (ls < n) {
    const le = lineEnd(buf, ls, n);
    const line = ls;
    ls = le + 1;

    // "sl:" — a decimal followed by ':' (this also rejects the header line).
    let i = skipBlanks(buf, line, le);
    if (Number.isNaN(parseDec(buf, i, le))) continue;
    i = cursor.pos;
    if (buf[i] !== 0x3a) continue;

    // local address:port
    i = skipBlanks(buf, i + 1, le);
    const local = i; // address hex digits are validated below, after the filter
    if (i + addrLen >= le || buf[i + addrLen] !== 0x3a) continue;
    i += addrLen + 1;
    const localPort = parseHex(buf, i, le);
    if (cursor.pos - i !== 4) continue;
    i = cursor.pos;

    // remote address:port
    i = skipBlanks(buf, i, le);
    const remote = i;
    if (i + addrLen >= le || buf[i + addrLen] !== 0x3a) continue;
    i += addrLen + 1;
    const remotePort = parseHex(buf, i, le);
    if (cursor.pos - i !== 4) continue;
    i = cursor.pos;

    // state
    i = skipBlanks(buf, i, le);
    const state = parseHex(buf, i, le);
    if (Number.isNaN(state)) continue;
    i = cursor.pos;

    // Filter before doing any more work for this line.
    if (wantPort !== undefined && localPort !== wantPort) continue;
    if (states !== undefined && !states.has(state)) continue;
    if (!hexRun(buf, local, le, addrLen) || !hexRun(buf, remote, le, addrLen)) continue;

    // tx_queue:rx_queue
    i = skipBlanks(buf, i, le);
    const txQueue = parseHex(buf, i, le);
    i = cursor.pos;
    if (Number.isNaN(txQueue) || buf[i] !== 0x3a) continue;
    const rxQueue = parseHex(buf, i + 1, le);
    i = cursor.pos;
    if (Number.isNaN(rxQueue)) continue;

    // tr:tm->when, retrnsmt
    i = skipBlanks(buf, i, le);
    if (skipToken(buf, i, le) === 0) continue;
    i = skipBlanks(buf, cursor.pos, le);
    if (skipToken(buf, i, le) === 0) continue;

    // uid, timeout, inode
    i = skipBlanks(buf, cursor.pos, le);
    const uid = parseDec(buf, i, le);
    if (Number.isNaN(uid) || uid < 0) continue;
    i = skipBlanks(buf, cursor.pos, le);
    if (skipToken(buf, i, le) === 0) continue;
    i = skipBlanks(buf, cursor.pos, le);
    const inode = parseDec(buf, i, le);
    if (Number.isNaN(inode) || inode < 0) continue;
    const after = buf[cursor.pos];
    if (cursor.pos < le && after !== 0x20 && after !== 0x09) continue;

    out.push({
      family,
      localAddress: family === 4 ? formatV4(buf, local) : formatV6(buf, local),
      localPort,
      remoteAddress: family === 4 ? formatV4(buf, remote) : formatV6(buf, remote),
      remotePort,
      state,
      txQueue,
      rxQueue,
      inode,
      uid,
    });
  }
}

/** True when buf[i, i+len) are all hex digits and fit before `end`. */
function hexRun(buf: Uint8Array, i: number, end: number, len: number): boolean {
  if (i + len > end) return false;
  for (let k = 0; k < len; k++) {
    if (hexDigit(buf[i + k]!) < 0) return false;
  }
  return true;
}

/** Scratch for the 16 network-order bytes of an address (decoded words). */
const bytes = new Uint8Array(16);

/**
 * Decodes `words` 8-hex-digit words at buf[at] into `bytes` in network order. Each word is the
 * %08X print of a u32 loaded from memory on a little-endian host, so its memory bytes are the
 * hex pairs in reverse order.
 */
function decodeWords(buf: Uint8Array, at: number, words: number): void {
  for (let w = 0; w < words; w++) {
    const base = at + w * 8;
    for (let b = 0; b < 4; b++) {
      const pair = base + (3 - b) * 2;
      bytes[w * 4 + b] = (hexDigit(buf[pair]!) << 4) | hexDigit(buf[pair + 1]!);
    }
  }
}

function formatV4(buf: Uint8Array, at: number): string {
  decodeWords(buf, at, 1);
  return `${bytes[0]}.${bytes[1]}.${bytes[2]}.${bytes[3]}`;
}

function formatV6(buf: Uint8Array, at: number): string {
  decodeWords(buf, at, 4);
  // IPv4-mapped ::ffff:a.b.c.d
  let zeros10 = true;
  for (let k = 0; k < 10; k++) {
    if (bytes[k] !== 0) {
      zeros10 = false;
      break;
    }
  }
  if (zeros10 && bytes[10] === 0xff && bytes[11] === 0xff) {
    return `::ffff:${bytes[12]}.${bytes[13]}.${bytes[14]}.${bytes[15]}`;
  }
  // RFC 5952: lower-case hex, no leading zeros, the first longest run (≥ 2) of zero groups → "::".
  let bestAt = -1;
  let bestLen = 1;
  let runAt = -1;
  for (let g = 0; g <= 8; g++) {
    const zero = g < 8 && bytes[2 * g] === 0 && bytes[2 * g + 1] === 0;
    if (zero) {
      if (runAt < 0) runAt = g;
    } else if (runAt >= 0) {
      if (g - runAt > bestLen) {
        bestAt = runAt;
        bestLen = g - runAt;
      }
      runAt = -1;
    }
  }
  let s = '';
  for (let g = 0; g < 8; g++) {
    if (g === bestAt) {
      s += g === 0 ? '::' : ':';
      g += bestLen - 1;
      continue;
    }
    s += ((bytes[2 * g]! << 8) | bytes[2 * g + 1]!).toString(16);
    if (g < 7) s += ':';
  }
  return s;
}
