import { isSandboxState } from '../api';

/** A sandbox state as a coloured pill. Unknown states get the neutral colour. */
export function StateBadge({ state, testId }: { state: string; testId?: string }) {
  const known = isSandboxState(state);
  return (
    <span className={`badge state-${known ? state : 'unknown'}`} data-testid={testId ?? 'state-badge'} data-state={state}>
      {state}
    </span>
  );
}
