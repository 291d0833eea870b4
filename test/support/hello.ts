// The probe's first message, for tests on either side of the link. It imports only proto,
// so guest tests may use it without reaching into host code.

import { DEFAULTS, PROTOCOL_VERSION, initialStatus, type Hello } from '@vsockdiag/proto';

/** A hello that passes proto's schema; `over` replaces whole top-level fields (one given
 *  as undefined keeps its default, so optional settings pass straight through). */
export function helloMessage(over: Partial<Omit<Hello, 'type'>> = {}): Hello {
  const given = Object.fromEntries(Object.entries(over).filter(([, v]) => v !== undefined));
  return {
    type: 'hello',
    protocol: PROTOCOL_VERSION,
    probeVersion: '0.1.0',
    instanceId: '0123456789abcdef',
    generation: 1,
    bootId: 'b0d5e1d0-0000-4000-8000-000000000000',
    clocks: { wallMs: 1_700_000_000_000, sinceBootMs: 1234.5 },
    lastSeq: 0,
    config: { target: DEFAULTS.target, expectPort: DEFAULTS.expectPort },
    status: initialStatus(DEFAULTS.expectPort),
    ...given,
  };
}
