// Grouped stacks from a dump: goroutines (count, state, wait, blocked-in frame, created-by,
// expandable stack) and threads (grouped by state, wait channel and syscall, with the
// kernel stack). Every name and frame here comes from the guest: text only.

import { Fragment } from 'react';
import type { Frame, GoroutineGroup, ThreadGroup, ThreadSyscall } from '../api';
import { useToggleSet } from '../hooks';

const base = (file: string) => file.split('/').pop() ?? file;

function frameWhere(f: Pick<Frame, 'file' | 'line'>): string {
  if (!f.file) return '';
  return f.line ? `${base(f.file)}:${f.line}` : base(f.file);
}

/** Application code (main, or a module path like github.com/…), as opposed to Go's standard library. */
export function isAppPkg(pkg: string | undefined): boolean {
  if (!pkg) return false;
  return pkg === 'main' || pkg.split('/')[0]!.includes('.');
}

function blockedText(g: GoroutineGroup): { func: string; where: string; app: boolean } {
  const f = g.blockedIn ?? g.frames[0];
  return f ? { func: f.func, where: frameWhere(f), app: isAppPkg(f.pkg) } : { func: g.state, where: '', app: false };
}

function Toggle({ open, onClick, label }: { open: boolean; onClick: () => void; label: string }) {
  return (
    <button type="button" className="linklike expand" aria-expanded={open}
      onClick={(e) => {
        e.stopPropagation();
        onClick();
      }}
      data-testid="expand-stack" title={label}>
      {open ? '▾' : '▸'}
    </button>
  );
}

export function GoroutineTable({ groups, testId = 'goroutine-groups' }: { groups: GoroutineGroup[]; testId?: string }) {
  const [open, toggle] = useToggleSet();
  if (!groups.length) return <p className="muted">No goroutines.</p>;
  return (
    <table className="groups" data-testid={testId}>
      <thead>
        <tr>
          <th />
          <th className="num">count</th>
          <th>state</th>
          <th className="num">wait</th>
          <th>blocked in</th>
          <th>created by</th>
        </tr>
      </thead>
      <tbody>
        {groups.map((g, i) => {
          const b = blockedText(g);
          const isOpen = open.has(i);
          return (
            <Fragment key={i}>
              <tr className={`group-row ${g.application ? 'app' : ''}`} data-testid="goroutine-group" onClick={() => toggle(i)}>
                <td>
                  <Toggle open={isOpen} onClick={() => toggle(i)} label="show the stack" />
                </td>
                <td className="num">{g.count}</td>
                <td>
                  {g.state}
                  {g.lockedToThread ? <span className="tag">locked</span> : null}
                </td>
                <td className="num">{g.waitMinutes !== undefined ? `${g.waitMinutes} min` : ''}</td>
                <td className={`mono ${b.app ? 'app-frame' : ''}`} data-testid="blocked-in">
                  {b.func}
                  {b.where && <span className="muted"> ({b.where})</span>}
                </td>
                <td className="mono small">
                  {g.createdBy ? (
                    <>
                      {g.createdBy.func}
                      {g.createdBy.goroutine !== undefined ? <span className="muted"> in goroutine {g.createdBy.goroutine}</span> : null}
                    </>
                  ) : (
                    <span className="muted">—</span>
                  )}
                </td>
              </tr>
              {isOpen && (
                <tr className="stack-row">
                  <td />
                  <td colSpan={5}>
                    <div className="muted small">
                      goroutine{g.count > 1 ? 's' : ''} {g.ids.join(', ')}
                      {g.count > g.ids.length ? ` … (${g.count} in all)` : ''}
                    </div>
                    <ol className="stack" data-testid="stack">
                      {g.stackUnavailable && <li className="muted">stack unavailable (running on another thread)</li>}
                      {g.frames.map((f, j) => (
                        <li
                          key={j}
                          className={`${g.blockedIn && f.func === g.blockedIn.func && f.line === g.blockedIn.line ? 'blocked' : ''} ${isAppPkg(f.pkg) ? 'app' : ''}`}
                        >
                          <span className="fn">
                            {f.func}({f.args ?? ''})
                          </span>
                          <span className="loc">
                            {f.file}
                            {f.line ? `:${f.line}` : ''}
                          </span>
                        </li>
                      ))}
                      {g.elided && <li className="muted">…additional frames elided…</li>}
                      {g.createdBy && (
                        <li className="created">
                          <span className="fn">created by {g.createdBy.func}</span>
                          <span className="loc">
                            {g.createdBy.file}
                            {g.createdBy.line ? `:${g.createdBy.line}` : ''}
                          </span>
                        </li>
                      )}
                    </ol>
                  </td>
                </tr>
              )}
            </Fragment>
          );
        })}
      </tbody>
    </table>
  );
}

function syscallText(s: ThreadSyscall): string {
  switch (s.kind) {
    case 'syscall':
      return s.name ? `${s.name} (${s.nr})` : `#${s.nr}`;
    case 'running':
      return 'running';
    case 'none':
      return 'not in a syscall';
    default:
      return '?';
  }
}

export function ThreadTable({ groups, testId = 'thread-groups' }: { groups: ThreadGroup[]; testId?: string }) {
  const [open, toggle] = useToggleSet();
  if (!groups.length) return <p className="muted">No threads.</p>;
  return (
    <table className="groups" data-testid={testId}>
      <thead>
        <tr>
          <th />
          <th className="num">count</th>
          <th>state</th>
          <th>wait channel</th>
          <th>syscall</th>
          <th>blocked in</th>
          <th>threads</th>
        </tr>
      </thead>
      <tbody>
        {groups.map((g, i) => {
          const isOpen = open.has(i);
          return (
            <Fragment key={i}>
              <tr className="group-row" data-testid="thread-group" onClick={() => toggle(i)}>
                <td>
                  <Toggle open={isOpen} onClick={() => toggle(i)} label="show the kernel stack" />
                </td>
                <td className="num">{g.count}</td>
                <td>{g.state}</td>
                <td className="mono">{g.wchan ?? <span className="muted">—</span>}</td>
                <td className="mono">{syscallText(g.syscall)}</td>
                <td className="mono" data-testid="blocked-in">
                  {g.blockedIn}
                </td>
                <td className="mono small">{g.comms.join(', ')}</td>
              </tr>
              {isOpen && (
                <tr className="stack-row">
                  <td />
                  <td colSpan={6}>
                    <div className="muted small">
                      tid {g.tids.join(', ')}
                      {g.count > g.tids.length ? ` … (${g.count} in all)` : ''}
                      {g.syscall.kind === 'syscall' && g.syscall.args.length ? ` · args ${g.syscall.args.join(' ')}` : ''}
                    </div>
                    <ol className="stack" data-testid="stack">
                      {g.stack.length ? g.stack.map((f, j) => <li key={j}>{f}</li>) : <li className="muted">no kernel stack</li>}
                    </ol>
                  </td>
                </tr>
              )}
            </Fragment>
          );
        })}
      </tbody>
    </table>
  );
}
