// One sandbox (/sandboxes/:id): state and reason, the boot waterfall, target and listener,
// sockets over time, kernel messages and log tail, and dumps. Live over the stream.

import { GuestCard, ListenerCard, TargetCard } from '../components/Cards';
import { ConditionChips } from '../components/ConditionChips';
import { Dumps } from '../components/Dumps';
import { KernelList } from '../components/KernelList';
import { LogTail } from '../components/LogTail';
import { SocketsChart } from '../components/SocketsChart';
import { StateBadge } from '../components/StateBadge';
import { Waterfall } from '../components/Waterfall';
import { clock, since } from '../format';
import { useNow } from '../hooks';
import { Link } from '../router';
import { useSandboxFeed } from '../sandboxFeed';

export function SandboxPage({ id }: { id: string }) {
  const view = useSandboxFeed(id);
  const now = useNow(1000);
  const d = view.detail;

  return (
    <main className="page sandbox">
      <nav className="crumbs">
        <Link to="/">← all sandboxes</Link>
      </nav>
      <header className="sb-head">
        <h1 className="sb-id" data-testid="sandbox-id">
          {id}
        </h1>
        {d && (
          <>
            <StateBadge state={d.state} testId="sandbox-state" />
            <span className="muted" data-testid="sandbox-since" title={clock(d.since)}>
              for {since(d.since, now)}
            </span>
            <span
              className="muted"
              data-testid="sandbox-generation"
              title={d.generationInfo ? `since ${clock(d.generationInfo.since)}: ${d.generationInfo.detail}` : ''}
            >
              · generation {d.generation} · session {d.session}
            </span>
            {!d.connected && d.state !== 'registered' && <span className="tag tag-warn">probe disconnected</span>}
          </>
        )}
      </header>
      {view.notFound && (
        <p className="error" data-testid="not-found">
          No sandbox with this id is registered with the collector.
        </p>
      )}
      {view.removed && <p className="banner banner-warn">This sandbox was unregistered: what is shown is the last known state.</p>}
      {view.error && <p className="error">{view.error}</p>}
      {(!d || !view.historyLoaded) && !view.notFound && !view.error && <p className="muted">loading…</p>}
      {/* Everything at once, when the detail and the history are in: no layout jumps under the reader's pointer. */}
      {d && view.historyLoaded && (
        <>
          <div className={`reason-box reason-${d.state}`}>
            <div className="sb-reason mono" data-testid="sandbox-reason">
              {d.reason}
            </div>
            <ConditionChips conditions={d.conditions} showDetail />
          </div>
          <Waterfall detail={d} events={view.events} now={now} />
          <div className="cards">
            <TargetCard detail={d} now={now} />
            <ListenerCard detail={d} now={now} />
            <GuestCard detail={d} now={now} />
          </div>
          <SocketsChart detail={d} events={view.events.sockets} loaded={view.historyLoaded} />
          <div className="two-col">
            <KernelList messages={d.kernel} />
            <LogTail events={view.events.logs} loaded={view.historyLoaded} />
          </div>
          <Dumps detail={d} />
        </>
      )}
    </main>
  );
}
