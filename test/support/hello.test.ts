import { FRAME_HEADER_BYTES, decodeProbeMessage, encodeMessage } from '@vsockdiag/proto';
import { describe, expect, it } from 'vitest';
import { helloMessage } from './hello.js';

const overWire = (m: ReturnType<typeof helloMessage>) => decodeProbeMessage(encodeMessage(m).subarray(FRAME_HEADER_BYTES));

describe('helloMessage', () => {
  it('is a hello the collector accepts off the wire', () => {
    const h = helloMessage();
    expect(overWire(h)).toEqual(h);
  });

  it('takes overrides of whole fields; undefined keeps the default', () => {
    const h = helloMessage({ generation: 3, lastSeq: 9, instanceId: undefined, status: undefined });
    expect(h).toMatchObject({ type: 'hello', generation: 3, lastSeq: 9, instanceId: helloMessage().instanceId });
    expect(h.status).toEqual(helloMessage().status);
    expect(overWire(h)).toEqual(h);
  });
});
