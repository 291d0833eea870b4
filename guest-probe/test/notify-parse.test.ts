import { describe, expect, it } from 'vitest';

import { MAX_KEYS, MAX_VALUE_CHARS, parseNotify } from '../src/notify/parse.js';

const p = (s: string | Buffer) => parseNotify(typeof s === 'string' ? Buffer.from(s) : s);

describe('parseNotify', () => {
  it('reads several assignments from one datagram, with or without a trailing newline', () => {
    const a = p('READY=1\nSTATUS=Processing requests...\nMAINPID=4711\nPHASE=boot');
    expect(a).toEqual({
      fields: { READY: '1', STATUS: 'Processing requests...', MAINPID: '4711', PHASE: 'boot' },
      phase: 'boot',
      status: 'Processing requests...',
      ready: true,
      stopping: false,
      mainPid: 4711,
      invalid: 0,
    });
    expect(p('READY=1\nSTATUS=Processing requests...\nMAINPID=4711\nPHASE=boot\n')).toEqual(a);
  });

  it('keeps unknown keys, empty values and "=" inside values', () => {
    const m = p('X_CUSTOM=42\nWATCHDOG=1\nEMPTY=\nEXPR=a=b=c\n');
    expect(m.fields).toEqual({ X_CUSTOM: '42', WATCHDOG: '1', EMPTY: '', EXPR: 'a=b=c' });
    expect(m.invalid).toBe(0);
  });

  it('sets ready / stopping only for the value 1', () => {
    expect(p('READY=1').ready).toBe(true);
    expect(p('READY=0').ready).toBe(false);
    expect(p('READY=yes').ready).toBe(false);
    expect(p('STOPPING=1').stopping).toBe(true);
    expect(p('STOPPING=1').ready).toBe(false);
  });

  it('reads ERRNO and MAINPID only when they are plain numbers', () => {
    expect(p('ERRNO=2').errno).toBe(2);
    expect(p('ERRNO=0').errno).toBe(0);
    expect(p('ERRNO=-1').errno).toBeUndefined();
    expect(p('ERRNO=-1').fields.ERRNO).toBe('-1');
    expect(p('MAINPID=0').mainPid).toBeUndefined();
    expect(p('MAINPID=12x').mainPid).toBeUndefined();
    expect(p('MAINPID=99999999999999999999').mainPid).toBeUndefined();
  });

  it('counts bad lines instead of throwing, and ignores empty lines', () => {
    const m = p('READY=1\nno equals sign\nlower=1\n=novalue\nSP ACE=1\n\n\nSTATUS=ok\nKEY-DASH=1\n');
    expect(m.fields).toEqual({ READY: '1', STATUS: 'ok' });
    expect(m.invalid).toBe(5);
    expect(m.ready).toBe(true);
    expect(p('').invalid).toBe(0);
    expect(p('\n').fields).toEqual({});
  });

  it('keeps the first occurrence of a repeated key (as systemd does)', () => {
    expect(p('STATUS=one\nSTATUS=two').status).toBe('one');
  });

  it('replaces bytes that are not UTF-8 and survives binary garbage', () => {
    const m = p(Buffer.concat([Buffer.from('STATUS=caf'), Buffer.from([0xc3]), Buffer.from('\nX=\u00e9\n')]));
    expect(m.status).toBe('caf\ufffd');
    expect(m.fields.X).toBe('\u00e9');

    const garbage = Buffer.alloc(4096);
    let seed = 12345;
    for (let i = 0; i < garbage.length; i++) {
      seed = (seed * 1103515245 + 12345) >>> 0;
      garbage[i] = seed >>> 24;
    }
    const g = p(garbage);
    expect(g.invalid).toBeGreaterThan(0);
    expect(Object.keys(g.fields).every((k) => /^[A-Z0-9_]+$/.test(k))).toBe(true);
    expect(p(Buffer.from([0, 0, 0xff, 0xfe, 0x0a, 0x80])).invalid).toBe(2);
  });

  it('cuts a 10 MB value to 1024 chars and keeps at most 64 keys', () => {
    const big = Buffer.alloc(10 * 1024 * 1024, 'x');
    big.write('STATUS=', 0);
    const t0 = performance.now();
    const m = p(big);
    expect(m.status?.length).toBe(MAX_VALUE_CHARS);
    expect(m.invalid).toBe(0);

    // 10 MB of short lines without '=' must stay linear.
    const lines = p(Buffer.alloc(10 * 1024 * 1024, 'ab\n'));
    expect(lines.invalid).toBe(Math.ceil((10 * 1024 * 1024) / 3));

    const many = Array.from({ length: 1000 }, (_, i) => `K${i}=${i}`).join('\n');
    const k = p(many);
    expect(Object.keys(k.fields)).toHaveLength(MAX_KEYS);
    expect(k.fields.K0).toBe('0');
    expect(k.fields.K63).toBe('63');
    expect(k.fields.K64).toBeUndefined();
    expect(performance.now() - t0).toBeLessThan(5000);
  });

  it('does not split a surrogate pair when cutting', () => {
    const v = 'a'.repeat(MAX_VALUE_CHARS - 1) + '\u{1F600}' + 'b';
    const s = p(`STATUS=${v}`).status ?? '';
    expect(s).toBe('a'.repeat(MAX_VALUE_CHARS - 1));
  });

  it('treats __proto__ and other prototype names as harmless', () => {
    const m = p('__proto__=polluted\nconstructor=x\nhasOwnProperty=1\nREADY=1\n');
    expect(m.invalid).toBe(3);
    expect(Object.getPrototypeOf(m.fields)).toBe(Object.prototype);
    expect(Object.keys(m.fields)).toEqual(['READY']);
    expect(({} as Record<string, unknown>).polluted).toBeUndefined();
    expect(Object.hasOwn(Object.prototype, 'polluted')).toBe(false);
    // Upper-case look-alikes are ordinary keys.
    expect(p('__PROTO__=x').fields).toEqual({ __PROTO__: 'x' });
  });
});
