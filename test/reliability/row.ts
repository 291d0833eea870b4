// One row of RELIABILITY.md: a fault or load the collector and probe were put through, the
// figure that shows how they came through it, and the command that reproduces it.
//
// Each scenario module in this folder exports `run(opts): Promise<ReliabilityRow[]>`.
// `make reliability` (run.ts) runs every scenario in full and writes the table; a
// `*.test.ts` beside a scenario runs it small (`full: false`, fixed seed) inside `make test`.

export interface ReliabilityRow {
  /** The table section: "hostile input", "crash safety", "Firecracker faults", "load", "access", "probe". */
  area: string;
  /** What was done, in a few words: "collector SIGKILL during busy boots ×20". */
  scenario: string;
  /** What came out, with numbers: "0 events lost, 0 duplicated, 20/20 restarts". */
  figure: string;
  /** Whether the figure meets what the scenario promises. */
  held: boolean;
  /** The command that reproduces this row alone. */
  command: string;
}

export interface ScenarioOptions {
  /** true in `make reliability` (the full counts), false in `make test` (a small fixed-seed set). */
  full: boolean;
  /** Progress lines for a long run (`make reliability` prints them). */
  log: (line: string) => void;
}

export type Scenario = (opts: ScenarioOptions) => Promise<ReliabilityRow[]>;
