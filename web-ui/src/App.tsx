// A first dashboard: the fleet with each sandbox's state and reason, and a page per
// sandbox (/sandboxes/:id). Guest-supplied text is only ever rendered as React text.

import { useEffect, useState } from 'react';
import { Unauthorized, getJson, setToken, type SandboxSummary } from './api';

const POLL_MS = 1000;
const ORDER = ['stuck', 'exited', 'silent', 'starting', 'booting', 'registered', 'ready'];

function usePoll<T>(path: string): { data: T | null; error: string | null; needToken: boolean } {
  const [data, setData] = useState<T | null>(null);
  const [error, setError] = useState<string | null>(null);
  const [needToken, setNeedToken] = useState(false);
  useEffect(() => {
    let alive = true;
    const load = () =>
      getJson<T>(path).then(
        (d) => alive && (setData(d), setError(null), setNeedToken(false)),
        (e: Error) => alive && (e instanceof Unauthorized ? setNeedToken(true) : setError(e.message)),
      );
    void load();
    const t = setInterval(load, POLL_MS);
    return () => {
      alive = false;
      clearInterval(t);
    };
  }, [path]);
  return { data, error, needToken };
}

function ago(iso: string): string {
  const s = Math.max(0, (Date.now() - Date.parse(iso)) / 1000);
  return s < 60 ? `${s.toFixed(0)}s` : s < 3600 ? `${Math.floor(s / 60)}m` : `${Math.floor(s / 3600)}h`;
}

function TokenPrompt() {
  const [value, setValue] = useState('');
  return (
    <form
      className="token"
      onSubmit={(e) => {
        e.preventDefault();
        setToken(value);
        location.reload();
      }}
    >
      <label>
        This collector needs an API token: <input type="password" value={value} onChange={(e) => setValue(e.target.value)} />
      </label>
      <button type="submit">Use token</button>
    </form>
  );
}

function Fleet() {
  const { data, error, needToken } = usePoll<{ sandboxes: SandboxSummary[] }>('/v1/sandboxes');
  if (needToken) return <TokenPrompt />;
  const list = [...(data?.sandboxes ?? [])].sort((a, b) => ORDER.indexOf(a.state) - ORDER.indexOf(b.state) || a.id.localeCompare(b.id));
  const counts = new Map<string, number>();
  for (const s of list) counts.set(s.state, (counts.get(s.state) ?? 0) + 1);
  return (
    <main>
      <h1>Sandboxes</h1>
      {error && <p className="error">{error}</p>}
      <p className="counts">
        {ORDER.filter((s) => counts.has(s)).map((s) => (
          <span key={s} className={`badge ${s}`}>
            {s} {counts.get(s)}
          </span>
        ))}
      </p>
      <table>
        <thead>
          <tr>
            <th>id</th>
            <th>state</th>
            <th>for</th>
            <th>last phase</th>
            <th>reason</th>
          </tr>
        </thead>
        <tbody>
          {list.map((s) => (
            <tr key={s.id} data-state={s.state}>
              <td>
                <a href={`/sandboxes/${encodeURIComponent(s.id)}`}>{s.id}</a>
              </td>
              <td>
                <span className={`badge ${s.state}`}>{s.state}</span>
              </td>
              <td>{ago(s.since)}</td>
              <td>{s.lastPhase ?? '—'}</td>
              <td className="reason">{s.reason}</td>
            </tr>
          ))}
        </tbody>
      </table>
      {data && list.length === 0 && <p>No sandboxes registered yet.</p>}
    </main>
  );
}

interface Detail extends SandboxSummary {
  udsPath: string;
  target: { pid: number; name: string; alive: boolean } | null;
  listener: { port: number; bound: boolean; pid?: number } | null;
  phases: Array<{ name?: string; status?: string; ready?: boolean; at: string }>;
}

function SandboxPage({ id }: { id: string }) {
  const { data, error, needToken } = usePoll<Detail>(`/v1/sandboxes/${encodeURIComponent(id)}`);
  if (needToken) return <TokenPrompt />;
  return (
    <main>
      <p>
        <a href="/">← all sandboxes</a>
      </p>
      <h1>{id}</h1>
      {error && <p className="error">{error}</p>}
      {data && (
        <>
          <p>
            <span className={`badge ${data.state}`}>{data.state}</span> for {ago(data.since)} · generation {data.generation}
          </p>
          <p className="reason">{data.reason}</p>
          <dl>
            <dt>target</dt>
            <dd>{data.target ? `${data.target.name} pid ${data.target.pid} ${data.target.alive ? 'alive' : 'gone'}` : 'not seen'}</dd>
            <dt>listener</dt>
            <dd>{data.listener ? `:${data.listener.port} ${data.listener.bound ? `bound${data.listener.pid ? ` by pid ${data.listener.pid}` : ''}` : 'not bound'}` : '—'}</dd>
            <dt>socket</dt>
            <dd>{data.udsPath}</dd>
          </dl>
          <h2>Phases</h2>
          <ol className="phases">
            {data.phases.map((p, i) => (
              <li key={i}>
                <time>{new Date(p.at).toLocaleTimeString()}</time> {p.ready ? 'READY=1' : (p.name ?? '')} <span className="status">{p.status ?? ''}</span>
              </li>
            ))}
          </ol>
        </>
      )}
    </main>
  );
}

export function App() {
  const m = /^\/sandboxes\/([^/]+)$/.exec(location.pathname);
  return m ? <SandboxPage id={decodeURIComponent(m[1]!)} /> : <Fleet />;
}
