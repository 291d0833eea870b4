// Splits a byte stream (a target's stdout, a log file, journalctl's output) into text lines
// with bounded memory whatever arrives: a 10 MB line, binary garbage, NULs, CRLF.
//
// Bytes are kept raw until the newline and decoded one line at a time (a line wholly inside
// one chunk in place, without a copy), so a multi-byte UTF-8 sequence split across chunks
// decodes whole, and an invalid sequence spoils only its own line. The raw buffer is fixed (4 bytes per allowed character): once a line outgrows
// it, the line is cut to the limit, reported at once, and the rest up to the newline is
// skipped without being kept.

import { MAX_LOG_LINE } from '@vsockdiag/proto';

export interface LineCounters {
  /** Lines reported (cut ones included). */
  lines: number;
  /** Lines cut to the length limit. */
  cut: number;
  /** Bytes fed. */
  bytes: number;
}

export type OnLine = (line: string, cut: boolean) => void;

const NEWLINE = 0x0a;
const CR = 0x0d;
// C0 controls except tab, DEL, and C1 controls (U+0080–U+009F, which a terminal would
// interpret as escape sequences too).
// biome-ignore lint/suspicious/noControlCharactersInRegex: finding control characters is the point
const CONTROL = /[\x00-\x08\x0a-\x1f\x7f-\x9f]/g;
// The same class without /g, whose lastIndex would make test() stateful.
const HAS_CONTROL = new RegExp(CONTROL.source);
// Any one byte decodes to at most one UTF-16 code unit, so a line of at most `maxChars`
// bytes always fits; and each three bytes give at least one code unit, so once the buffer
// holds 4·maxChars bytes the decoded line is surely longer than the limit.
const BYTES_PER_CHAR = 4;

/** Cuts `s` to at most `max` UTF-16 code units without splitting a surrogate pair. */
export function cutString(s: string, max: number): string {
  if (s.length <= max) return s;
  const last = s.charCodeAt(max - 1);
  return s.slice(0, last >= 0xd800 && last <= 0xdbff ? max - 1 : max);
}

export class LineSplitter {
  readonly counters: LineCounters = { lines: 0, cut: 0, bytes: 0 };
  private readonly buf: Buffer;
  private len = 0;
  /** Inside a line already reported as cut: skip bytes until the next newline. */
  private skipping = false;
  private readonly decoder = new TextDecoder('utf-8', { fatal: false });

  constructor(
    private readonly onLine: OnLine,
    private readonly maxChars: number = MAX_LOG_LINE,
  ) {
    this.buf = Buffer.allocUnsafe(maxChars * BYTES_PER_CHAR);
  }

  /** Takes a chunk; the chunk is not kept (its bytes are copied), so callers may reuse it. */
  feed(chunk: Buffer): void {
    this.counters.bytes += chunk.length;
    let start = 0;
    while (start < chunk.length) {
      const nl = chunk.indexOf(NEWLINE, start);
      const end = nl === -1 ? chunk.length : nl;
      if (!this.skipping) {
        const room = this.buf.length - this.len;
        const n = end - start;
        if (n > room) {
          chunk.copy(this.buf, this.len, start, start + room);
          this.len += room;
          this.emitBuffered(true);
          this.skipping = true;
        } else if (nl !== -1 && this.len === 0) {
          // The whole line is in this chunk: decode it in place, no copy.
          this.emit(chunk.subarray(start, end), false);
        } else {
          chunk.copy(this.buf, this.len, start, end);
          this.len += n;
          if (nl !== -1) this.emitBuffered(false);
        }
      }
      if (nl === -1) return;
      this.skipping = false;
      start = nl + 1;
    }
  }

  /** Reports a final line that has no newline. The splitter can be fed again afterwards. */
  end(): void {
    if (!this.skipping && this.len > 0) this.emitBuffered(false);
    this.skipping = false;
    this.len = 0;
  }

  private emitBuffered(overflow: boolean): void {
    const len = this.len;
    this.len = 0;
    this.emit(this.buf.subarray(0, len), overflow);
  }

  /** Reports one line from its bytes (without the newline); `overflow`: already known cut. */
  private emit(bytes: Buffer, overflow: boolean): void {
    if (!overflow && bytes.length > 0 && bytes[bytes.length - 1] === CR) bytes = bytes.subarray(0, bytes.length - 1);
    let line = this.decoder.decode(bytes);
    let cut = overflow;
    if (line.length > this.maxChars) {
      line = cutString(line, this.maxChars);
      cut = true;
    }
    if (HAS_CONTROL.test(line)) line = line.replace(CONTROL, '\ufffd');
    this.counters.lines++;
    if (cut) this.counters.cut++;
    this.onLine(line, cut);
  }
}
