// Grouped stacks from a dump: goroutines by stack (count, state and its flags, wait,
// blocked-in frame, created-by, pprof labels, expandable stack), goroutines by creator (count,
// creator, states, blocked-in frames) and threads (grouped by state, wait channel and
// syscall, with the kernel stack). Every name, label and frame here comes from the guest:
// text only.

import { Fragment } from 'react';
import type { CreatorGroup, Frame, GoroutineGroup, LabelSetCount, ThreadGroup, ThreadSyscall } from '../api';
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

/** A label key or value as Go prints it: bare when plain, else quoted with its control characters escaped. */
function token(s: string): string {
  return /^[A-Za-z0-9./_]+$/.test(s) ? s : JSON.stringify(s);
}

function LabelSet({ set, total }: { set: LabelSetCount; total: number }) {
  return (
    <span className="label-set">
      {Object.keys(set.labels).map((k) => (
        <span className="kvchip" key={k}>
          {token(k)}: {token(set.labels[k]!)}
        </span>
      ))}
      {set.count !== total && <span className="muted"> ×{set.count}</span>}
    </span>
  );
}

/** The group's most common label set, and how many others there are. */
function LabelsCell({ g }: { g: GoroutineGroup }) {
  const top = g.labelSets?.[0];
  if (!top) return <span className="muted">—</span>;
  const more = (g.labelSetsTotal ?? g.labelSets!.length) - 1;
  return (
    <>
      <LabelSet set={top} total={g.count} />
      {more > 0 && <span className="muted small"> +{more} more</span>}
    </>
  );
}

function StateTags({ g }: { g: Pick<GoroutineGroup, 'leaked' | 'durable' | 'unparsed' | 'lockedToThread'> }) {
  return (
    <>
      {g.lockedToThread ? <span className="tag">locked</span> : null}
      {g.leaked ? (
        <span
          className="tag tag-bad"
          data-testid="flag-leaked"
          title="the goroutine leak profile found it blocked on something unreachable"
        >
          leaked
        </span>
      ) : null}
      {g.durable ? (
        <span className="tag" title="durably blocked in a synctest bubble">
          durable
        </span>
      ) : null}
      {g.unparsed ? (
        <span className="tag tag-warn" data-testid="flag-unparsed" title="the header was not understood; see the raw text">
          header not understood
        </span>
      ) : null}
    </>
  );
}

function Toggle({ open, onClick, label }: { open: boolean; onClick: () => void; label: string }) {
  return (
    <button
      type="button"
      className="linklike expand"
      aria-expanded={open}
      onClick={(e) => {
        e.stopPropagation();
        onClick();
      }}
      data-testid="expand-stack"
      title={label}
    >
      {open ? '▾' : '▸'}
    </button>
  );
}

export function GoroutineTable({ groups, testId = 'goroutine-groups' }: { groups: GoroutineGroup[]; testId?: string }) {
  const [open, toggle] = useToggleSet();
  if (!groups.length) return <p className="muted">No goroutines.</p>;
  // The labels column only when some goroutine carried labels (Go 1.27, or 1.26 with tracebacklabels=1).
  const labelled = groups.some((g) => g.labelSets?.length);
  const columns = labelled ? 6 : 5;
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
          {labelled && <th>labels</th>}
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
                  <StateTags g={g} />
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
                {labelled && (
                  <td className="small" data-testid="group-labels">
                    <LabelsCell g={g} />
                  </td>
                )}
              </tr>
              {isOpen && (
                <tr className="stack-row">
                  <td />
                  <td colSpan={columns}>
                    <div className="muted small">
                      goroutine{g.count > 1 ? 's' : ''} {g.ids.join(', ')}
                      {g.count > g.ids.length ? ` … (${g.count} in all)` : ''}
                    </div>
                    {g.labelSets?.length ? (
                      <ul className="label-sets small" data-testid="label-sets">
                        {g.labelSets.map((set, j) => (
                          <li key={j}>
                            <LabelSet set={set} total={g.count} />
                          </li>
                        ))}
                        {(g.labelSetsTotal ?? 0) > g.labelSets.length && (
                          <li className="muted">… {g.labelSetsTotal! - g.labelSets.length} more label sets</li>
                        )}
                        {g.labelled! < g.count && <li className="muted">{g.count - g.labelled!} without labels</li>}
                      </ul>
                    ) : null}
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

/**
 * Goroutines by the `go` statement that started them: a storm caught in many places and
 * states is one row here, however many rows it takes by stack.
 */
export function CreatorTable({ groups }: { groups: CreatorGroup[] }) {
  const [open, toggle] = useToggleSet();
  if (!groups.length) return <p className="muted">No goroutines.</p>;
  return (
    <table className="groups" data-testid="creator-groups">
      <thead>
        <tr>
          <th />
          <th className="num">count</th>
          <th>created by</th>
          <th>states</th>
          <th>blocked in</th>
          <th className="num">stacks</th>
        </tr>
      </thead>
      <tbody>
        {groups.map((c, i) => {
          const isOpen = open.has(i);
          const top = c.blockedIn[0];
          return (
            <Fragment key={i}>
              <tr className={`group-row ${c.application ? 'app' : ''}`} data-testid="creator-group" onClick={() => toggle(i)}>
                <td>
                  <Toggle open={isOpen} onClick={() => toggle(i)} label="show the members' ids and blocked-in frames" />
                </td>
                <td className="num">{c.count}</td>
                <td className={`mono ${c.createdBy && isAppPkg(c.createdBy.pkg) ? 'app-frame' : ''}`} data-testid="creator">
                  {c.createdBy ? (
                    <>
                      {c.createdBy.func}
                      {frameWhere(c.createdBy) && <span className="muted"> ({frameWhere(c.createdBy)})</span>}
                    </>
                  ) : (
                    <span className="muted">no creator (the main goroutine)</span>
                  )}
                  {c.unparsed ? (
                    <span className="tag tag-warn">
                      {c.unparsed} header{c.unparsed === 1 ? '' : 's'} not understood
                    </span>
                  ) : null}
                </td>
                <td className="small" data-testid="creator-states">
                  {c.states.map((s, j) => (
                    <span key={j} className={`kvchip ${s.state.endsWith('(leaked)') ? 'leaked' : ''}`}>
                      {s.count} {s.state}
                    </span>
                  ))}
                </td>
                <td className="mono small">
                  {top ? (
                    <>
                      {top.func}
                      {frameWhere(top) && <span className="muted"> ({frameWhere(top)})</span>}
                      {c.blockedIn.length > 1 || top.count !== c.count ? <span className="muted"> ×{top.count}</span> : null}
                      {c.blockedIn.length > 1 && <span className="muted"> +{c.blockedIn.length - 1} more</span>}
                    </>
                  ) : (
                    <span className="muted">—</span>
                  )}
                </td>
                <td className="num">{c.stackGroups}</td>
              </tr>
              {isOpen && (
                <tr className="stack-row">
                  <td />
                  <td colSpan={5}>
                    <div className="muted small">
                      goroutine{c.count > 1 ? 's' : ''} {c.ids.join(', ')}
                      {c.count > c.ids.length ? ` … (${c.count} in all)` : ''}
                      {c.createdBy?.goroutine !== undefined ? ` · all created by goroutine ${c.createdBy.goroutine}` : ''}
                      {c.waitMinutes !== undefined ? ` · longest wait ${c.waitMinutes} min` : ''}
                    </div>
                    <ol className="stack" data-testid="creator-frames">
                      {c.blockedIn.map((f, j) => (
                        <li key={j} className={isAppPkg(f.pkg) ? 'app' : ''}>
                          <span className="fn">
                            {f.count} blocked in {f.func}
                          </span>
                          <span className="loc">
                            {f.file}
                            {f.line ? `:${f.line}` : ''}
                          </span>
                        </li>
                      ))}
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
