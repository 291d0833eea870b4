// Durations up to "now" in a reason or a condition's detail: "alive 12.0s", "3.1s ago".
//
// Such text is right only at the moment it is formatted. The main API formats it when it is
// read. The readiness thread (readiness/) answers later, on its own clock, from what the main
// thread posted it: there the reason is a template in which each such duration is a marker
// holding the moment it counts from (host ms), and the thread formats the markers when it
// answers. A marker carries a token made for this collector process, so text from the guest
// that ends up in a reason (a phase's name, a health check's error) cannot pass for one.

import { randomBytes } from 'node:crypto';
import { formatDuration } from '@vsockdiag/proto';

/** Formats the time from `from` (host ms) to the moment of the text. */
export type Elapsed = (from: number) => string;

/** Durations up to `now`, formatted at once. */
export function elapsedAt(now: number): Elapsed {
  return (from) => formatDuration(Math.max(0, now - from));
}

const OPEN = '\u0001';
const CLOSE = '\u0002';

export class ReasonTemplates {
  /** Writes a marker where a duration up to the reader's moment goes. */
  readonly mark: Elapsed;
  private readonly marker: RegExp;

  /** `token`: the main thread makes one; the readiness thread is given the same. */
  constructor(readonly token: string = randomBytes(12).toString('hex')) {
    if (!/^[0-9a-f]{16,64}$/.test(token)) throw new Error('a reason template token is 16 to 64 hex digits');
    this.mark = (from) => `${OPEN}${token}:${from}${CLOSE}`;
    this.marker = new RegExp(`${OPEN}${token}:([^${CLOSE}]*)${CLOSE}`, 'g');
  }

  /** The template's text at `now`: each marker formatted as the time since its moment. */
  render(template: string, now: number): string {
    if (!template.includes(OPEN)) return template;
    return template.replace(this.marker, (_, from: string) => formatDuration(Math.max(0, now - Number(from))));
  }
}
