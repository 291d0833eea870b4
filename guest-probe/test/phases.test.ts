import { describe, expect, it } from 'vitest';
import { eventSchema } from '@vsockdiag/proto';
import { parseNotify } from '../src/notify/parse.js';
import { phaseEvent } from '../src/phases.js';

const ev = (text: string, pid = 1234) => phaseEvent(parseNotify(Buffer.from(text)), pid);

/** The event as the collector would validate it once the ring numbers it. */
const validate = (body: object) => eventSchema.parse({ ...body, seq: 1, t: 0 });

describe('phaseEvent', () => {
  it('maps PHASE to name', () => {
    expect(ev('PHASE=listening')).toEqual({ kind: 'phase', source: 'notify', name: 'listening', pid: 1234 });
  });

  it('maps STATUS to status', () => {
    expect(ev('STATUS=loading templates 3/7')).toEqual({ kind: 'phase', source: 'notify', status: 'loading templates 3/7', pid: 1234 });
  });

  it('maps READY=1 to ready: true and STOPPING=1 to stopping: true', () => {
    expect(ev('READY=1')).toEqual({ kind: 'phase', source: 'notify', ready: true, pid: 1234 });
    expect(ev('STOPPING=1')).toEqual({ kind: 'phase', source: 'notify', stopping: true, pid: 1234 });
  });

  it('combines PHASE, STATUS and READY in one event', () => {
    expect(ev('PHASE=serving\nSTATUS=up on :49983\nREADY=1\n')).toEqual({
      kind: 'phase',
      source: 'notify',
      name: 'serving',
      status: 'up on :49983',
      ready: true,
      pid: 1234,
    });
  });

  it('keeps an empty STATUS (it clears the status line)', () => {
    expect(ev('STATUS=')).toEqual({ kind: 'phase', source: 'notify', status: '', pid: 1234 });
  });

  it('keeps unknown keys in fields, and not the known ones', () => {
    expect(ev('PHASE=init\nMAINPID=42\nX_CUSTOM=hello world')).toEqual({
      kind: 'phase',
      source: 'notify',
      name: 'init',
      pid: 1234,
      fields: { MAINPID: '42', X_CUSTOM: 'hello world' },
    });
  });

  it('records a datagram with only unknown keys', () => {
    expect(ev('ERRNO=2')).toEqual({ kind: 'phase', source: 'notify', pid: 1234, fields: { ERRNO: '2' } });
  });

  it('ignores BARRIER=1 and WATCHDOG=1-only datagrams', () => {
    expect(ev('BARRIER=1')).toBeNull();
    expect(ev('WATCHDOG=1')).toBeNull();
    expect(ev('WATCHDOG=1\nBARRIER=1\n')).toBeNull();
    expect(ev('WATCHDOG=trigger')).toBeNull();
  });

  it('does not put BARRIER or WATCHDOG in fields when the datagram has more', () => {
    expect(ev('WATCHDOG=1\nSTATUS=alive')).toEqual({ kind: 'phase', source: 'notify', status: 'alive', pid: 1234 });
  });

  it('ignores datagrams with nothing meaningful (READY=0, invalid lines, empty)', () => {
    expect(ev('READY=0')).toBeNull();
    expect(ev('STOPPING=0')).toBeNull();
    expect(ev('not an assignment\nlower=case')).toBeNull();
    expect(ev('')).toBeNull();
  });

  it('omits pid 0 (sender unknown)', () => {
    const e = ev('PHASE=x', 0);
    expect(e).toEqual({ kind: 'phase', source: 'notify', name: 'x' });
    expect(e).not.toHaveProperty('pid');
  });

  it('cuts the phase name to 256 characters', () => {
    const e = ev(`PHASE=${'p'.repeat(300)}`);
    expect(e).toMatchObject({ kind: 'phase', source: 'notify', name: 'p'.repeat(256) });
  });

  it('drops keys too long for the event schema (a field name is at most 64 characters)', () => {
    const long = 'K'.repeat(65);
    const ok = 'K'.repeat(64);
    expect(ev(`PHASE=init\n${long}=1\n${ok}=2`)).toEqual({
      kind: 'phase',
      source: 'notify',
      name: 'init',
      pid: 1234,
      fields: { [ok]: '2' },
    });
    expect(ev(`${long}=1`)).toBeNull();
  });

  it('produces events the collector accepts, even from odd datagrams', () => {
    for (const text of [
      'PHASE=x\nSTATUS=y\nREADY=1\nSTOPPING=1\nMAINPID=7',
      `PHASE=${'n'.repeat(1000)}\nSTATUS=${'s'.repeat(1000)}`,
      Array.from({ length: 70 }, (_, i) => `K${i}=v`).join('\n'),
      // A key longer than the event schema allows for a field name.
      `PHASE=init\n${'K'.repeat(100)}=1`,
    ]) {
      const e = ev(text);
      expect(e).not.toBeNull();
      expect(() => validate(e!)).not.toThrow();
    }
  });
});
