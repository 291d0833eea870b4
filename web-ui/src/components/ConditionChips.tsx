import type { Condition } from '../api';

const SEVERE = new Set(['socket-storm', 'oom', 'hung-task', 'segfault', 'not-accepting', 'health-failing']);

/** Conditions as small chips; the detail (guest-derived) is text, in the chip and its title. */
export function ConditionChips({ conditions, showDetail = false }: { conditions: Condition[]; showDetail?: boolean }) {
  if (!conditions.length) return null;
  return (
    <span className="chips">
      {conditions.map((c) => (
        <span
          key={`${c.name}:${c.subject ?? ''}`}
          className={`chip ${SEVERE.has(c.name) ? 'chip-severe' : ''}`}
          data-testid="condition"
          data-name={c.name}
          title={c.detail}
        >
          <b>{c.name}</b>
          {showDetail && c.detail ? <span className="chip-detail">{c.detail}</span> : null}
        </span>
      ))}
    </span>
  );
}
