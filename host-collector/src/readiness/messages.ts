// What passes between the main thread and the readiness thread (worker.ts): the main thread
// posts each sandbox's verdict as it changes, the thread says whether it listens.

import type { SandboxState } from '../catalogue.js';
import type { LogLevel } from '../collector/logger.js';
import type { ThreadPriority } from './priority.js';

/** A sandbox's verdict as of its last evaluation, its reason a template (collector/elapsed.ts)
 *  that the thread renders at each answer, by the read rule of collector/verdict-clock.ts. */
export interface MirroredReading {
  id: string;
  state: SandboxState;
  reason: string;
  generation: number;
  session: number;
  /** When the evaluation ran, and when its timer looks again (null: never by itself), host ms. */
  evaluatedAt: number;
  dueAt: number | null;
}

/** Main → thread: readings that changed, and sandboxes that are gone. */
export interface MirrorUpdate {
  put: MirroredReading[];
  removed: string[];
}

/** Thread → main, once: it listens (on `url`, at a priority: priority.ts), or it cannot. */
export type ThreadStatus = { type: 'listening'; url: string; priority: ThreadPriority } | { type: 'failed'; message: string };

export interface ReadinessWorkerData {
  host: string;
  port: number;
  token?: string;
  loopbackOnly: boolean;
  /** The reason templates' token (collector/elapsed.ts). */
  templateToken: string;
  logLevel: LogLevel;
}
