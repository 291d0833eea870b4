// The messages of the live stream (GET /v1/stream, WebSocket), declared once: the collector
// sends them (stream.ts), the dashboard (web-ui/src/stream.ts, sandboxFeed.ts) and
// `vsockdiag tail` read them by these types, and docs/openapi.json lists them as components.
//
//   server → client: `snapshot` on connect; `sandbox` when a sandbox's summary changed (at
//   most every 250 ms per sandbox); `removed`; `event` for every stored event of a sandbox
//   the client subscribed to (with its id, as GET …/events lists it); `subscribed` confirms
//   a subscription: from then on no event of that sandbox is missed.
//   client → server: `subscribe` / `unsubscribe` with a sandbox id.

import { Type, type Static } from 'typebox';
import { Event, SandboxSummary } from './schemas.js';

const Id = Type.String({ minLength: 1, maxLength: 256 });

export const StreamServerMessage = Type.Union(
  [
    Type.Object({ type: Type.Literal('snapshot'), sandboxes: Type.Array(SandboxSummary) }),
    Type.Object({ type: Type.Literal('sandbox'), sandbox: SandboxSummary }),
    Type.Object({ type: Type.Literal('removed'), id: Id }),
    Type.Object({ type: Type.Literal('event'), id: Id, event: Event }),
    Type.Object({ type: Type.Literal('subscribed'), id: Id }),
  ],
  { title: 'StreamServerMessage' },
);

export const StreamClientMessage = Type.Union(
  [Type.Object({ type: Type.Literal('subscribe'), id: Id }), Type.Object({ type: Type.Literal('unsubscribe'), id: Id })],
  { title: 'StreamClientMessage' },
);

export type StreamServerMessage = Static<typeof StreamServerMessage>;
export type StreamClientMessage = Static<typeof StreamClientMessage>;
export type StreamMessageType = StreamServerMessage['type'];
/** One server message of the given type. */
export type StreamMessageOf<T extends StreamMessageType> = Extract<StreamServerMessage, { type: T }>;
