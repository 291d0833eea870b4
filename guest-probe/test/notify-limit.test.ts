// The notify datagram limit is enforced in C (the addon's receive buffer), which cannot
// import proto's MAX_NOTIFY_DATAGRAM: this keeps the two numbers one.

import fs from 'node:fs';
import { MAX_NOTIFY_DATAGRAM } from '@vsockdiag/proto';
import { describe, expect, it } from 'vitest';

describe('the notify datagram limit', () => {
  it("notify.h's NOTIFY_MAX_DATAGRAM equals proto's MAX_NOTIFY_DATAGRAM", () => {
    const header = fs.readFileSync(new URL('../native/src/notify.h', import.meta.url), 'utf8');
    const defined = [...header.matchAll(/^#define\s+NOTIFY_MAX_DATAGRAM\s+(\S+)\s*$/gm)].map((m) => m[1]);
    expect(defined).toEqual([String(MAX_NOTIFY_DATAGRAM)]);
  });
});
