// Grouped stacks from a dump: goroutines by stack (count, state and its flags, wait,
// blocked-in frame, created-by, pprof labels, expandable stack), goroutines by creator (count,
// creator, states, blocked-in frames) and threads (grouped by state, wait channel and
// syscall, with the kernel stack). Every name, label and frame here comes from the guest:
// text only.

import type { ReactNode } from 'react';
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

/** A table of groups: a toggle column, the count, then the columns `head` names. */
function GroupsTable({ testId, head, children }: { testId: string; head: ReactNode; children: ReactNode }) {
  return (
    <table className="groups" data-testid={testId}>
      <thead>
        <tr>
          <th />
          <th className="num">count</th>
          {head}
        </tr>
      </thead>
      <tbody>{children}</tbody>
    </table>
  );
}

/** One group, number `index` of its table: its summary row (after the toggle cell), and under
 *  it, while open, its details across the other `columns` cells. The whole row toggles, and so
 *  does the button. `app`: the group is the application's (its row is marked). */
function GroupRows({
  toggles: [open, toggle],
  index,
  label,
  app = false,
  testId,
  columns,
  details,
  children,
}: {
  toggles: ReturnType<typeof useToggleSet>;
  index: number;
  label: string;
  app?: boolean;
  testId: string;
  columns: number;
  details: () => ReactNode;
  children: ReactNode;
}) {
  const isOpen = open.has(index);
  return (
    <>
      <tr className={`group-row ${app ? 'app' : ''}`} data-testid={testId} onClick={() => toggle(index)}>
        <td>
          <Toggle open={isOpen} onClick={() => toggle(index)} label={label} />
        </td>
        {children}
      </tr>
      {isOpen && (
        <tr className="stack-row">
          <td />
          <td colSpan={columns}>{details()}</td>
        </tr>
      )}
    </>
  );
}

/** "goroutines 1, 2, 3 … (40 in all)": the members a group lists, and how many it has. */
function members(noun: string, ids: number[], count: number): string {
  return `${noun} ${ids.join(', ')}${count > ids.length ? ` … (${count} in all)` : ''}`;
}

/** A frame's file and line, whole, as the stack lists show it. */
function Loc({ f }: { f: Pick<Frame, 'file' | 'line'> }) {
  return (
    <span className="loc">
      {f.file}
      {f.line ? `:${f.line}` : ''}
    </span>
  );
}

/** A function and, muted, the base name of its file and its line. */
function FuncAt({ func, where }: { func: string; where: string }) {
  return (
    <>
      {func}
      {where && <span className="muted"> ({where})</span>}
    </>
  );
}

export function GoroutineTable({ groups, testId = 'goroutine-groups' }: { groups: GoroutineGroup[]; testId?: string }) {
  const toggles = useToggleSet();
  if (!groups.length) return <p className="muted">No goroutines.</p>;
  // The labels column only when some goroutine carried labels (Go 1.27, or 1.26 with tracebacklabels=1).
  const labelled = groups.some((g) => g.labelSets?.length);
  const columns = labelled ? 6 : 5;
  return (
    <GroupsTable
      testId={testId}
      head={
        <>
          <th>state</th>
          <th className="num">wait</th>
          <th>blocked in</th>
          <th>created by</th>
          {labelled && <th>labels</th>}
        </>
      }
    >
      {groups.map((g, i) => {
        const b = blockedText(g);
        return (
          <GroupRows
            key={i}
            toggles={toggles}
            index={i}
            label="show the stack"
            app={g.application}
            testId="goroutine-group"
            columns={columns}
            details={() => (
              <>
                <div className="muted small">{members(g.count > 1 ? 'goroutines' : 'goroutine', g.ids, g.count)}</div>
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
                      <Loc f={f} />
                    </li>
                  ))}
                  {g.elided && <li className="muted">…additional frames elided…</li>}
                  {g.createdBy && (
                    <li className="created">
                      <span className="fn">created by {g.createdBy.func}</span>
                      <Loc f={g.createdBy} />
                    </li>
                  )}
                </ol>
              </>
            )}
          >
            <td className="num">{g.count}</td>
            <td>
              {g.state}
              <StateTags g={g} />
            </td>
            <td className="num">{g.waitMinutes !== undefined ? `${g.waitMinutes} min` : ''}</td>
            <td className={`mono ${b.app ? 'app-frame' : ''}`} data-testid="blocked-in">
              <FuncAt func={b.func} where={b.where} />
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
          </GroupRows>
        );
      })}
    </GroupsTable>
  );
}

/**
 * Goroutines by the `go` statement that started them: a storm caught in many places and
 * states is one row here, however many rows it takes by stack.
 */
export function CreatorTable({ groups }: { groups: CreatorGroup[] }) {
  const toggles = useToggleSet();
  if (!groups.length) return <p className="muted">No goroutines.</p>;
  return (
    <GroupsTable
      testId="creator-groups"
      head={
        <>
          <th>created by</th>
          <th>states</th>
          <th>blocked in</th>
          <th className="num">stacks</th>
        </>
      }
    >
      {groups.map((c, i) => {
        const top = c.blockedIn[0];
        return (
          <GroupRows
            key={i}
            toggles={toggles}
            index={i}
            label="show the members' ids and blocked-in frames"
            app={c.application}
            testId="creator-group"
            columns={5}
            details={() => (
              <>
                <div className="muted small">
                  {members(c.count > 1 ? 'goroutines' : 'goroutine', c.ids, c.count)}
                  {c.createdBy?.goroutine !== undefined ? ` · all created by goroutine ${c.createdBy.goroutine}` : ''}
                  {c.waitMinutes !== undefined ? ` · longest wait ${c.waitMinutes} min` : ''}
                </div>
                <ol className="stack" data-testid="creator-frames">
                  {c.blockedIn.map((f, j) => (
                    <li key={j} className={isAppPkg(f.pkg) ? 'app' : ''}>
                      <span className="fn">
                        {f.count} blocked in {f.func}
                      </span>
                      <Loc f={f} />
                    </li>
                  ))}
                </ol>
              </>
            )}
          >
            <td className="num">{c.count}</td>
            <td className={`mono ${c.createdBy && isAppPkg(c.createdBy.pkg) ? 'app-frame' : ''}`} data-testid="creator">
              {c.createdBy ? (
                <FuncAt func={c.createdBy.func} where={frameWhere(c.createdBy)} />
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
                  <FuncAt func={top.func} where={frameWhere(top)} />
                  {c.blockedIn.length > 1 || top.count !== c.count ? <span className="muted"> ×{top.count}</span> : null}
                  {c.blockedIn.length > 1 && <span className="muted"> +{c.blockedIn.length - 1} more</span>}
                </>
              ) : (
                <span className="muted">—</span>
              )}
            </td>
            <td className="num">{c.stackGroups}</td>
          </GroupRows>
        );
      })}
    </GroupsTable>
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
  const toggles = useToggleSet();
  if (!groups.length) return <p className="muted">No threads.</p>;
  return (
    <GroupsTable
      testId={testId}
      head={
        <>
          <th>state</th>
          <th>wait channel</th>
          <th>syscall</th>
          <th>blocked in</th>
          <th>threads</th>
        </>
      }
    >
      {groups.map((g, i) => (
        <GroupRows
          key={i}
          toggles={toggles}
          index={i}
          label="show the kernel stack"
          testId="thread-group"
          columns={6}
          details={() => (
            <>
              <div className="muted small">
                {members('tid', g.tids, g.count)}
                {g.syscall.kind === 'syscall' && g.syscall.args.length ? ` · args ${g.syscall.args.join(' ')}` : ''}
              </div>
              <ol className="stack" data-testid="stack">
                {g.stack.length ? g.stack.map((f, j) => <li key={j}>{f}</li>) : <li className="muted">no kernel stack</li>}
              </ol>
            </>
          )}
        >
          <td className="num">{g.count}</td>
          <td>{g.state}</td>
          <td className="mono">{g.wchan ?? <span className="muted">—</span>}</td>
          <td className="mono">{syscallText(g.syscall)}</td>
          <td className="mono" data-testid="blocked-in">
            {g.blockedIn}
          </td>
          <td className="mono small">{g.comms.join(', ')}</td>
        </GroupRows>
      ))}
    </GroupsTable>
  );
}
