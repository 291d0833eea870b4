// Phase markers from the notify socket become `phase` events. Keys with no meaning for
// readiness are kept in `fields`; datagrams carrying nothing worth recording (systemd's
// BARRIER=1 handshake, watchdog pings) are ignored.

import { MAX_FIELD_KEY, MAX_NAME, type EventBody } from '@vsockdiag/proto';
import { cutString } from './logs/lines.js';
import type { NotifyMessage } from './notify/parse.js';

const KNOWN = new Set(['PHASE', 'STATUS', 'READY', 'STOPPING']);
const NOISE = new Set(['BARRIER', 'WATCHDOG']);

export function phaseEvent(msg: NotifyMessage, pid: number): EventBody | null {
  const extra: Record<string, string> = {};
  let extras = 0;
  for (const [k, v] of Object.entries(msg.fields)) {
    // A longer key would fail the event schema; such keys are dropped, not the marker.
    if (KNOWN.has(k) || NOISE.has(k) || k.length > MAX_FIELD_KEY) continue;
    extra[k] = v;
    extras++;
  }
  const meaningful = msg.phase !== undefined || msg.status !== undefined || msg.ready || msg.stopping || extras > 0;
  if (!meaningful) return null;
  return {
    kind: 'phase',
    source: 'notify',
    ...(msg.phase !== undefined ? { name: cutString(msg.phase, MAX_NAME) } : {}),
    ...(msg.status !== undefined ? { status: msg.status } : {}),
    ...(msg.ready ? { ready: true } : {}),
    ...(msg.stopping ? { stopping: true } : {}),
    ...(pid > 0 ? { pid } : {}),
    ...(extras > 0 ? { fields: extra } : {}),
  };
}
