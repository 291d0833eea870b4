import { useStreamStatus } from '../stream';

/** "live" while the stream is open; otherwise says we are retrying and polling meanwhile. */
export function LiveStatus() {
  const status = useStreamStatus();
  const text = status === 'live' ? 'live' : status === 'connecting' ? 'connecting…' : 'reconnecting…';
  const title =
    status === 'live'
      ? 'Live updates over /v1/stream'
      : 'The live stream is not connected: retrying with backoff, polling the API every 2 s meanwhile';
  return (
    <span className={`live live-${status}`} data-testid="live-status" data-status={status} title={title}>
      <span className="live-dot" aria-hidden="true" />
      {text}
      {status !== 'live' && <span className="live-note"> · polling</span>}
    </span>
  );
}
