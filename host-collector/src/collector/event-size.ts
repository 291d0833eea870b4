// How big one stored event may be. A host-side storage policy, not a protocol limit: the
// collector never rejects an event for its size (the probe would only resend it after the
// reconnect, for ever), it stores it cut and says so. The probe's own bounds (frame size,
// text and log-line lengths) are in proto/src/limits.ts; within them a guest can still send
// an event whose JSON is megabytes (control characters escape to six bytes each).

/**
 * Largest `data` (as JSON, in bytes) stored for one event. Comfortably above the largest
 * event a well-behaved probe sends: a full log.lines batch, 200 lines of 2,048 characters,
 * is about 410 KB.
 */
export const MAX_EVENT_DATA_BYTES = 512 * 1024;

/** Room kept for the `truncated` note itself. */
const NOTE_ROOM = 4096;

/** What replaces an oversize event's data: its fields that fit, and a note of the rest. */
export interface Truncated {
  /** Size of the data as sent, JSON bytes. */
  bytes: number;
  limit: number;
  /** Fields left out entirely. */
  omitted?: string[];
  /** Array fields of which only the leading items were kept: field → how many there were. */
  cut?: Record<string, number>;
}

const jsonBytes = (v: unknown) => Buffer.byteLength(JSON.stringify(v) ?? 'null');

/**
 * The event's data as stored, with its JSON and that JSON's size: `json` itself when it is within MAX_EVENT_DATA_BYTES, else a
 * cut copy. Fields are kept in order while they fit; an array that does not fit keeps its
 * leading items (a log batch keeps its first lines); anything else that does not fit is
 * left out. The copy carries `truncated` saying what was lost.
 */
export function capEventData(data: Record<string, unknown>, json: string): { data: Record<string, unknown>; json: string; bytes: number } {
  const bytes = Buffer.byteLength(json);
  if (bytes <= MAX_EVENT_DATA_BYTES) return { data, json, bytes };
  const out: Record<string, unknown> = {};
  const omitted: string[] = [];
  const cut: Record<string, number> = {};
  let room = MAX_EVENT_DATA_BYTES - NOTE_ROOM;
  for (const [key, value] of Object.entries(data)) {
    const size = jsonBytes(key) + 1 + jsonBytes(value) + 1;
    if (size <= room) {
      out[key] = value;
      room -= size;
    } else if (Array.isArray(value)) {
      room -= jsonBytes(key) + 4;
      const kept: unknown[] = [];
      for (const item of value) {
        const itemSize = jsonBytes(item) + 1;
        if (itemSize > room) break;
        kept.push(item);
        room -= itemSize;
      }
      out[key] = kept;
      cut[key] = value.length;
    } else {
      omitted.push(key);
    }
  }
  const note: Truncated = {
    bytes,
    limit: MAX_EVENT_DATA_BYTES,
    ...(omitted.length ? { omitted } : {}),
    ...(Object.keys(cut).length ? { cut } : {}),
  };
  out.truncated = note;
  const cutJson = JSON.stringify(out);
  return { data: out, json: cutJson, bytes: Buffer.byteLength(cutJson) };
}
