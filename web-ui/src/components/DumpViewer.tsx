// One dump: its grouped goroutines (by stack, or by creator) or threads, what did not move
// since the previous dump of the same mode, and the raw text (shown in place, or downloaded
// from /raw).

import { memo, useEffect, useState, type MouseEvent } from 'react';
import { ApiError, Unauthorized, downloadWithToken, getJson, getToken, sandboxPath, type DumpDiff, type DumpFull } from '../api';
import { clock, fmtBytes } from '../format';
import { useAuthEpoch } from '../hooks';
import { CreatorTable, GoroutineTable, ThreadTable } from './GroupTables';

type Load<T> = { kind: 'loading' } | { kind: 'ok'; value: T } | { kind: 'none'; message: string } | { kind: 'error'; message: string };

/** Memoised: re-renders only for another dump (its parent changes with every sandbox update). */
export const DumpViewer = memo(function DumpViewer({ sandboxId, dumpId }: { sandboxId: string; dumpId: number }) {
  const epoch = useAuthEpoch();
  const [dump, setDump] = useState<Load<DumpFull>>({ kind: 'loading' });
  const [diff, setDiff] = useState<Load<DumpDiff>>({ kind: 'loading' });
  const [raw, setRaw] = useState(false);
  const [downloadError, setDownloadError] = useState<string | null>(null);
  const path = `${sandboxPath(sandboxId)}/dumps/${dumpId}`;

  useEffect(() => {
    let alive = true;
    setDump({ kind: 'loading' });
    setDiff({ kind: 'loading' });
    setRaw(false);
    getJson<DumpFull>(path).then(
      (d) => alive && setDump({ kind: 'ok', value: d }),
      (e: Error) => alive && !(e instanceof Unauthorized) && setDump({ kind: 'error', message: e.message }),
    );
    getJson<DumpDiff>(`${path}/diff`).then(
      (d) => alive && setDiff({ kind: 'ok', value: d }),
      (e: Error) => {
        if (!alive || e instanceof Unauthorized) return;
        if (e instanceof ApiError && e.status === 404) setDiff({ kind: 'none', message: 'No earlier dump of this mode to compare with.' });
        else setDiff({ kind: 'error', message: e.message });
      },
    );
    return () => {
      alive = false;
    };
  }, [path, epoch]);

  const download = (e: MouseEvent<HTMLAnchorElement>) => {
    // A plain link cannot carry the bearer token: fetch it when one is set.
    if (!getToken()) return;
    e.preventDefault();
    const name = `${sandboxId}-dump-${dumpId}.txt`.replace(/[^A-Za-z0-9._-]/g, '_');
    downloadWithToken(`${path}/raw`, name).then(
      () => setDownloadError(null),
      (err: Error) => setDownloadError(err.message),
    );
  };

  return (
    <div className="dump-viewer" data-testid="dump-viewer" data-dump-id={dumpId}>
      {dump.kind === 'loading' && <p className="muted">loading dump {dumpId}…</p>}
      {dump.kind === 'error' && <p className="error">{dump.message}</p>}
      {dump.kind === 'ok' && (
        <>
          <div className="dump-head">
            <h3>
              Dump #{dump.value.id} <span className="muted">· {dump.value.mode}</span>
            </h3>
            <span className="muted small">
              {clock(dump.value.createdAt)} · {dump.value.trigger} · via {dump.value.source} · generation {dump.value.generation} ·{' '}
              {fmtBytes(dump.value.bytes)}
            </span>
            {!dump.value.complete && (
              <span className="tag tag-warn" data-testid="dump-incomplete">
                incomplete
              </span>
            )}
            <span className="spacer" />
            <button type="button" onClick={() => setRaw((r) => !r)} data-testid="raw-toggle" aria-pressed={raw}>
              {raw ? 'Grouped view' : 'Raw text'}
            </button>
            <a className="button" href={`${path}/raw`} download onClick={download} data-testid="dump-download">
              Download
            </a>
          </div>
          {downloadError && <p className="error">{downloadError}</p>}
          {dump.value.error && <p className="error">Dump error: {dump.value.error}</p>}
          {dump.value.reason && <p className="mono small">{dump.value.reason}</p>}
          {raw ? (
            <pre className="raw" data-testid="dump-raw">
              {dump.value.text}
            </pre>
          ) : (
            <Groups dump={dump.value} />
          )}
          {!raw && <DiffView diff={diff} />}
        </>
      )}
    </div>
  );
});

/** What a reader must know before trusting the groups: headers not understood, or lost. */
function ParseNotes({ dump }: { dump: DumpFull }) {
  const lost = dump.headers !== undefined && dump.goroutines !== undefined ? dump.headers - dump.goroutines : 0;
  const lines = (dump.unparsedHeaders ?? []).map((h) => h.line);
  return (
    <>
      {dump.unparsed ? (
        <p className="note warn small" data-testid="dump-unparsed" data-count={dump.unparsed}>
          {dump.unparsed} goroutine header{dump.unparsed === 1 ? ' was' : 's were'} not understood: kept with state “?” and their frames
          (line
          {lines.length === 1 ? '' : 's'} {lines.join(', ')}
          {dump.unparsed > lines.length ? ', …' : ''}; see the raw text).
        </p>
      ) : null}
      {lost > 0 ? (
        <p className="note warn small" data-testid="dump-lost">
          {lost} of {dump.headers} goroutine headers were counted but not read: the groups below miss them.
        </p>
      ) : null}
    </>
  );
}

function GoroutineGroups({ dump, groups }: { dump: DumpFull; groups: NonNullable<DumpFull['goroutineGroups']> }) {
  const [view, setView] = useState<'stack' | 'creator'>('stack');
  const creators = dump.creatorGroups;
  const total = dump.goroutines ?? groups.reduce((n, g) => n + g.count, 0);
  return (
    <>
      <ParseNotes dump={dump} />
      <div className="view-switch">
        <p className="small">
          {total} goroutines in {groups.length} groups by stack{creators ? `, from ${creators.length} creators` : ''}
          {dump.truncated ? ' (the dump was cut short)' : ''}.{' '}
          {view === 'stack'
            ? 'Groups whose stack reaches application code are marked at the left; click a row for its stack.'
            : 'One row per go statement, whatever stacks and states its goroutines were caught in.'}
        </p>
        {creators && (
          // biome-ignore lint/a11y/useSemanticElements: a segmented control; a fieldset would bring a border and a legend
          <span className="seg" role="group" aria-label="group goroutines">
            <button type="button" aria-pressed={view === 'stack'} onClick={() => setView('stack')} data-testid="view-by-stack">
              By stack
            </button>
            <button type="button" aria-pressed={view === 'creator'} onClick={() => setView('creator')} data-testid="view-by-creator">
              By creator
            </button>
          </span>
        )}
      </div>
      {view === 'creator' && creators ? <CreatorTable groups={creators} /> : <GoroutineTable groups={groups} />}
    </>
  );
}

function Groups({ dump }: { dump: DumpFull }) {
  if (dump.goroutineGroups) return <GoroutineGroups dump={dump} groups={dump.goroutineGroups} />;
  if (dump.threads) {
    const t = dump.threads;
    return (
      <>
        <p className="small">
          {t.tasks} threads of pid {t.pid} (<span className="mono">{t.comm}</span>
          {t.arch ? `, ${t.arch}` : ''}) in {t.groups.length} groups by state, wait channel and syscall. Click a row for its kernel stack.
        </p>
        <ThreadTable groups={t.groups} />
      </>
    );
  }
  return <p className="muted">Not a goroutine or threads dump: see the raw text.</p>;
}

function DiffView({ diff }: { diff: Load<DumpDiff> }) {
  return (
    <section className="dump-diff" data-testid="dump-diff">
      <h4>Compared with the previous dump</h4>
      {diff.kind === 'loading' && <p className="muted">loading…</p>}
      {(diff.kind === 'none' || diff.kind === 'error') && <p className="muted">{diff.message}</p>}
      {diff.kind === 'ok' && <DiffBody d={diff.value} />}
    </section>
  );
}

function DiffBody({ d }: { d: DumpDiff }) {
  if (d.kind === 'mismatch') return <p className="muted">The two dumps are of different kinds: nothing to compare.</p>;
  if (d.kind === 'unknown') return <p className="muted">Neither a goroutine nor a threads dump: nothing to compare.</p>;
  if (d.kind === 'threads' && d.samePid === false) {
    return <p className="muted">The process restarted between dump #{d.older} and this one (another pid): nothing stayed in place.</p>;
  }
  const what = d.kind === 'threads' ? 'threads' : 'goroutines';
  return (
    <>
      <p data-testid="diff-summary">
        Since dump #{d.older}:{' '}
        <b className={d.stuckCount ? 'bad' : ''}>
          {d.stuckCount} {what} did not move
        </b>
        , {d.moved} moved, {d.gone} gone, {d.appeared} appeared
        {d.kind === 'goroutines' && !d.complete ? ' (counts cover listed members only)' : ''}.
      </p>
      {d.stuck.length > 0 ? (
        d.kind === 'threads' ? (
          <ThreadTable groups={d.stuck} testId="diff-stuck" />
        ) : (
          <GoroutineTable groups={d.stuck} testId="diff-stuck" />
        )
      ) : null}
    </>
  );
}
