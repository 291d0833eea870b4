// The collector's news as one typed stream, for what reports it elsewhere (export/: metrics
// histograms, OTLP, webhooks): state transitions with what an operator acts on, sessions,
// targets, phases and dumps. The registry publishes what its sandboxes tell it, the dump
// service its dumps; nobody polls.
//
// Published synchronously from ingest, so a subscriber may only note or queue: anything
// slow (a network call) must happen later, off this call. A subscriber that throws is
// logged and skipped; it never breaks ingest or the subscribers after it.

import type { DumpMode } from '@vsockdiag/proto';
import type { DumpTrigger, SandboxState } from '../catalogue.js';
import type { Logger } from './logger.js';

interface About {
  /** The sandbox. */
  id: string;
  generation: number;
  /** Host ms. */
  at: number;
}

export type FeedEvent =
  | (About & { type: 'session.open'; bootId: string; instanceId: string; probeVersion: string })
  | (About & { type: 'session.close'; reason: string; code: string | null })
  /** A new target process (first start, or a restart): its phases start afresh. `startedAt`: host ms. */
  | (About & { type: 'target'; pid: number; name: string; startedAt: number })
  /** A phase marker; `guestMs` is the guest's own time (ms since its boot), `at` on the host clock. */
  | (About & { type: 'phase'; guestMs: number; name?: string; ready: boolean })
  | (About & {
      type: 'state';
      state: SandboxState;
      previous: SandboxState;
      reason: string;
      conditions: { name: string; detail: string }[];
      /** From the input that decided it (the probe's event, or the threshold a timer waited
       *  for) to the recorded transition. */
      lagMs: number;
      /** When the current target started (host ms), if there is one. */
      targetStartedAt: number | null;
      /** The sandbox's stored dumps of this generation, oldest first. */
      dumpIds: number[];
    })
  | (About & {
      type: 'dump';
      dumpId: number | null;
      mode: DumpMode;
      trigger: DumpTrigger;
      ok: boolean;
      error?: string;
      /** From the request to the dump stored (or given up). */
      durationMs: number;
    })
  /** The dumps the collector takes by itself on entering stuck are over (taken, failed or
   *  skipped by the rate limit); `dumpIds` are the ones it stored. */
  | (About & { type: 'auto-dumps'; dumpIds: number[] })
  | (About & { type: 'removed' });

export type FeedListener = (e: FeedEvent) => void;

export class Feed {
  private readonly listeners: FeedListener[] = [];

  constructor(private readonly log: Logger) {}

  subscribe(fn: FeedListener): () => void {
    this.listeners.push(fn);
    return () => {
      const i = this.listeners.indexOf(fn);
      if (i >= 0) this.listeners.splice(i, 1);
    };
  }

  publish(e: FeedEvent): void {
    for (const fn of this.listeners) {
      try {
        fn(e);
      } catch (err) {
        this.log.error({ err, sandbox: e.id, type: e.type }, 'a feed subscriber failed');
      }
    }
  }
}
