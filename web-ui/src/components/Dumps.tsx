// The sandbox's dumps: capture one (threads, goroutines or native; a destructive SIGQUIT
// dump asks first and says envd will be restarted), the list, and the selected dump.

import { memo, useEffect, useRef, useState } from 'react';
import {
  ApiError,
  DUMP_MODES,
  DUMP_MODE_INFO,
  Unauthorized,
  getJson,
  postJson,
  sandboxPath,
  type DumpBrief,
  type DumpMode,
  type SandboxDetail,
} from '../api';
import { clock, fmtMs } from '../format';
import { useAuthEpoch, useNow } from '../hooks';
import { DumpViewer } from './DumpViewer';

/** Memoised: the page re-renders every second for its clocks; this only when its data changes. */
export const Dumps = memo(function Dumps({ detail }: { detail: SandboxDetail }) {
  const id = detail.id;
  const epoch = useAuthEpoch();
  const [dumps, setDumps] = useState<DumpBrief[] | null>(null);
  const [listError, setListError] = useState<string | null>(null);
  const [selected, setSelected] = useState<number | null>(null);
  const [mode, setMode] = useState<DumpMode>('threads');
  const [destructive, setDestructive] = useState(false);
  const [confirming, setConfirming] = useState(false);
  const [busy, setBusy] = useState<{ mode: DumpMode; destructive: boolean; t0: number } | null>(null);
  const [captureError, setCaptureError] = useState<string | null>(null);
  const userPicked = useRef(false);

  // Reload the list when the sandbox reports a new dump (auto dumps on stuck, or ours).
  const refsKey = detail.dumps.map((d) => `${d.id}:${d.complete}`).join(',');
  const [reload, setReload] = useState(0);
  useEffect(() => {
    let alive = true;
    getJson<{ dumps: DumpBrief[] }>(`${sandboxPath(id)}/dumps`).then(
      (r) => {
        if (!alive) return;
        setDumps(r.dumps);
        setListError(null);
        setSelected((cur) => (cur !== null && r.dumps.some((d) => d.id === cur) ? cur : (r.dumps[0]?.id ?? null)));
      },
      (e: Error) => alive && !(e instanceof Unauthorized) && setListError(e.message),
    );
    return () => {
      alive = false;
    };
  }, [id, refsKey, reload, epoch]);

  // Follow the newest dump unless the reader picked one.
  const newest = dumps?.[0]?.id ?? null;
  useEffect(() => {
    if (!userPicked.current && newest !== null) setSelected(newest);
  }, [newest]);

  const capture = async () => {
    const isDestructive = mode === 'goroutines' && destructive;
    setConfirming(false);
    setCaptureError(null);
    setBusy({ mode, destructive: isDestructive, t0: Date.now() });
    try {
      const r = await postJson<DumpBrief>(`${sandboxPath(id)}/dumps`, { mode, destructive: isDestructive });
      userPicked.current = false;
      setSelected(r.id);
      if (r.error) setCaptureError(`Dump #${r.id} failed: ${r.error}`);
      setReload((n) => n + 1);
    } catch (e) {
      if (e instanceof Unauthorized) setCaptureError('The API needs a token: enter it and try again.');
      else if (e instanceof ApiError) setCaptureError(`${e.code}: ${e.message}`);
      else setCaptureError((e as Error).message);
    } finally {
      setBusy(null);
    }
  };

  const onCapture = () => {
    if (mode === 'goroutines' && destructive) setConfirming(true);
    else void capture();
  };

  const target = detail.target;
  const targetName = target?.name ?? 'envd';

  return (
    <section className="panel" data-testid="dumps">
      <h2>Dumps</h2>
      <div className="capture">
        <label>
          Mode{' '}
          <select
            value={mode}
            onChange={(e) => {
              setMode(e.target.value as DumpMode);
              setDestructive(false);
            }}
            data-testid="dump-mode"
            disabled={!!busy}
          >
            {DUMP_MODES.map((m) => (
              <option key={m} value={m}>
                {m}
              </option>
            ))}
          </select>
        </label>
        {mode === 'goroutines' && (
          <label className={`destructive ${destructive ? 'on' : ''}`}>
            <input
              type="checkbox"
              checked={destructive}
              onChange={(e) => setDestructive(e.target.checked)}
              data-testid="dump-destructive"
              disabled={!!busy}
            />{' '}
            destructive (SIGQUIT)
          </label>
        )}
        <button
          type="button"
          className={`primary ${mode === 'goroutines' && destructive ? 'danger' : ''}`}
          onClick={onCapture}
          disabled={!!busy}
          data-testid="capture-dump"
        >
          {busy ? 'Capturing…' : 'Capture dump'}
        </button>
        <span className="muted small">
          {DUMP_MODE_INFO[mode].meaning}
          {mode === 'goroutines' && destructive
            ? '; with SIGQUIT the Go runtime prints every goroutine and envd exits (its supervisor restarts it)'
            : ''}
          .
        </span>
      </div>
      {confirming && (
        <div className="confirm" role="alertdialog" aria-labelledby="confirm-title" data-testid="confirm-destructive">
          <p id="confirm-title">
            <b>This kills envd{target ? ` (${targetName === 'envd' ? '' : `${targetName}, `}pid ${target.pid})` : ''}.</b> A destructive
            goroutine dump sends it SIGQUIT: the Go runtime prints every goroutine and exits, and envd is then restarted by its supervisor.
            Open connections to it drop while it boots again. Take the dump?
          </p>
          <div className="modal-actions">
            <button type="button" className="danger" onClick={() => void capture()} data-testid="confirm-destructive-ok">
              Kill envd and take the dump
            </button>
            {/* biome-ignore lint/a11y/noAutofocus: an alertdialog moves focus into itself, onto the safe choice: Enter must not kill envd */}
            <button type="button" onClick={() => setConfirming(false)} data-testid="confirm-destructive-cancel" autoFocus>
              Cancel
            </button>
          </div>
        </div>
      )}
      {busy && <Progress busy={busy} />}
      {captureError && (
        <p className="error" data-testid="dump-error">
          {captureError}
        </p>
      )}
      {listError && <p className="error">{listError}</p>}
      {dumps && dumps.length === 0 && <p className="muted">No dumps yet. A threads dump is taken by itself when the sandbox gets stuck.</p>}
      {dumps && dumps.length > 0 && (
        <ul className="dump-list" data-testid="dump-list">
          {dumps.map((d) => (
            <li
              key={d.id}
              className={`dump-item ${d.id === selected ? 'selected' : ''}`}
              data-testid="dump-item"
              data-id={d.id}
              data-mode={d.mode}
              data-complete={d.complete ? 'true' : 'false'}
            >
              <button
                type="button"
                className="dump-pick"
                onClick={() => {
                  userPicked.current = true;
                  setSelected(d.id);
                }}
                aria-pressed={d.id === selected}
              >
                <span className="dump-id">#{d.id}</span>
                <span className="dump-mode">{d.mode}</span>
                <span className="muted small">
                  {clock(d.createdAt)} · {d.trigger} · {d.source}
                </span>
                {d.error ? (
                  <span className="tag tag-bad">failed</span>
                ) : !d.complete ? (
                  <span className="tag tag-warn">incomplete</span>
                ) : null}
                {d.top && (
                  <span className="dump-top mono small" data-testid="dump-top">
                    {d.top.count}× {d.top.blockedIn}
                  </span>
                )}
              </button>
            </li>
          ))}
        </ul>
      )}
      {selected !== null && <DumpViewer key={selected} sandboxId={id} dumpId={selected} />}
    </section>
  );
});

function Progress({ busy }: { busy: { mode: DumpMode; destructive: boolean; t0: number } }) {
  const now = useNow(200);
  return (
    <div className="progress" data-testid="dump-progress" role="status">
      <span className="spinner" aria-hidden="true" />
      Taking a {busy.destructive ? 'destructive ' : ''}
      {busy.mode} dump… {fmtMs(Math.max(0, now - busy.t0))}
      <span className="muted small"> (the collector waits for the probe; this can take several seconds)</span>
    </div>
  );
}
