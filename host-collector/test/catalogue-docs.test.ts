// The docs list every code as the catalogues define it (as fastify checks its errors page
// against its errors): a code added to a catalogue without its row in docs/codes.md, a row
// for a code that no longer exists, or a meaning changed on one side only fails here. The
// README's own tables of states and conditions are held to the same catalogues.

import fs from 'node:fs';
import { ADDRESS_ERROR_CODES, DUMP_MODE_INFO, DUMP_SOURCE_INFO, PROTOCOL_ERROR_CODES } from '@vsockdiag/proto';
import { describe, expect, it } from 'vitest';
import {
  API_ERRORS,
  COLLECTOR_EVENTS,
  CONDITIONS,
  DUMP_TRIGGERS,
  GENERATION_CAUSES,
  LIFECYCLE_EVENTS,
  REQUEST_ERRORS,
  SANDBOX_STATES,
} from '../src/catalogue.js';

const read = (rel: string) => fs.readFileSync(new URL(`../../${rel}`, import.meta.url), 'utf8');

interface Table {
  heading: string;
  header: string[];
  rows: string[][];
}

/** The cells of a table row (a `\|` inside a cell is not a column break). */
const cells = (line: string) =>
  line
    .trim()
    .replace(/^\||\|$/g, '')
    .split(/(?<!\\)\|/)
    .map((c) => c.trim());

/** Every table in a markdown text, with the heading it is under. */
function tables(markdown: string): Table[] {
  const lines = markdown.split('\n');
  const out: Table[] = [];
  let heading = '';
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i]!;
    const h = /^#{1,6}\s+(.+)$/.exec(line);
    if (h) heading = h[1]!.trim();
    if (!line.startsWith('|') || !/^\|[\s:|-]+\|$/.test(lines[i + 1] ?? '')) continue;
    const table: Table = { heading, header: cells(line), rows: [] };
    for (i += 2; i < lines.length && lines[i]!.startsWith('|'); i++) table.rows.push(cells(lines[i]!));
    out.push(table);
    i--;
  }
  return out;
}

interface Listing {
  /** Where the table is: its file, the heading it is under, and its header row. */
  file: string;
  heading: string;
  header: string[];
  /** Each code with the cells after it, as its row must show them. */
  expected: Map<string, string[]>;
}

const rowsOf = <T>(catalogue: Record<string, T>, rest: (entry: T) => string[]) =>
  new Map(Object.entries(catalogue).map(([code, entry]) => [code, rest(entry)]));
const meaning = (e: { meaning: string }) => [e.meaning];

const LISTINGS: Listing[] = [
  {
    file: 'docs/codes.md',
    heading: 'Protocol close codes',
    header: ['code', 'cause', 'meaning'],
    expected: rowsOf(PROTOCOL_ERROR_CODES, (e) => [e.cause, e.meaning]),
  },
  { file: 'docs/codes.md', heading: 'Address errors', header: ['code', 'meaning'], expected: rowsOf(ADDRESS_ERROR_CODES, meaning) },
  {
    file: 'docs/codes.md',
    heading: 'API error codes',
    header: ['code', 'status', 'meaning'],
    expected: rowsOf(API_ERRORS, (e) => [String(e.status), e.meaning]),
  },
  { file: 'docs/codes.md', heading: 'States', header: ['state', 'meaning'], expected: rowsOf(SANDBOX_STATES, meaning) },
  { file: 'docs/codes.md', heading: 'Conditions', header: ['condition', 'raised when'], expected: rowsOf(CONDITIONS, meaning) },
  { file: 'docs/codes.md', heading: 'Collector event kinds', header: ['kind', 'meaning'], expected: rowsOf(COLLECTOR_EVENTS, meaning) },
  {
    file: 'docs/codes.md',
    heading: 'Generations and sessions',
    header: ['cause', 'meaning'],
    expected: rowsOf(GENERATION_CAUSES, meaning),
  },
  {
    file: 'docs/codes.md',
    heading: 'Generations and sessions',
    header: ['event', 'meaning'],
    expected: rowsOf(LIFECYCLE_EVENTS, meaning),
  },
  { file: 'docs/codes.md', heading: 'Dumps', header: ['mode', 'meaning'], expected: rowsOf(DUMP_MODE_INFO, meaning) },
  { file: 'docs/codes.md', heading: 'Dumps', header: ['source', 'meaning'], expected: rowsOf(DUMP_SOURCE_INFO, meaning) },
  { file: 'docs/codes.md', heading: 'Dumps', header: ['trigger', 'meaning'], expected: rowsOf(DUMP_TRIGGERS, meaning) },
  { file: 'docs/codes.md', heading: 'Request errors', header: ['code', 'meaning'], expected: rowsOf(REQUEST_ERRORS, meaning) },
  { file: 'README.md', heading: 'States', header: ['state', 'meaning'], expected: rowsOf(SANDBOX_STATES, meaning) },
  { file: 'README.md', heading: 'States', header: ['condition', 'raised when'], expected: rowsOf(CONDITIONS, meaning) },
];

/** What is wrong with a table against its catalogue; empty when they agree. */
function problems(table: Table, expected: Map<string, string[]>): { missing: string[]; unknown: string[]; differing: string[] } {
  const listed = new Map<string, string[]>();
  const unknown: string[] = [];
  for (const [first, ...rest] of table.rows) {
    const code = /^`([^`]+)`$/.exec(first ?? '')?.[1];
    if (code === undefined || !expected.has(code) || listed.has(code)) unknown.push(first ?? '');
    else listed.set(code, rest);
  }
  const missing = [...expected.keys()].filter((code) => !listed.has(code));
  const differing = [...listed]
    .filter(([code, rest]) => JSON.stringify(rest) !== JSON.stringify(expected.get(code)))
    .map(([code, rest]) => `${code}: the docs say ${JSON.stringify(rest)}, the catalogue ${JSON.stringify(expected.get(code))}`);
  return { missing, unknown, differing };
}

describe('the docs list the catalogues', () => {
  for (const l of LISTINGS) {
    it(`${l.file}, ${l.heading}: the ${l.header[0]} table`, () => {
      const found = tables(read(l.file)).filter((t) => t.heading === l.heading && JSON.stringify(t.header) === JSON.stringify(l.header));
      expect(found, `one table headed ${l.header.join(' | ')} under "${l.heading}"`).toHaveLength(1);
      const p = problems(found[0]!, l.expected);
      expect(p.missing, 'in the catalogue, missing from the docs').toEqual([]);
      expect(p.unknown, 'listed in the docs, not in the catalogue (or twice)').toEqual([]);
      expect(p.differing, 'meaning differs').toEqual([]);
    });
  }

  it('finds each kind of drift (so a clean result above means something)', () => {
    const expected = rowsOf({ a: { meaning: 'one' }, b: { meaning: 'two' } }, meaning);
    const doc = '## T\n\n| code | meaning |\n|---|---|\n| `a` | one, reworded |\n| `c` | three |\n| `a` | one |\n';
    const [t] = tables(doc);
    expect(t).toMatchObject({ heading: 'T', header: ['code', 'meaning'] });
    expect(problems(t!, expected)).toEqual({
      missing: ['b'],
      unknown: ['`c`', '`a`'],
      differing: ['a: the docs say ["one, reworded"], the catalogue ["one"]'],
    });
  });

  it("the README's API section points to docs/codes.md instead of its own list of codes", () => {
    const readme = read('README.md');
    const start = readme.indexOf('\n## API\n');
    const api = readme.slice(start, readme.indexOf('\n## ', start + 1));
    expect(start).toBeGreaterThan(0);
    expect(api).toContain('[docs/codes.md](docs/codes.md)');
  });

  it('codes the README mentions in passing are catalogue codes, with their statuses', () => {
    const readme = read('README.md');
    const closeCodes = [...readme.matchAll(/\bERR_[A-Z_]+\b/g)].map((m) => m[0]);
    expect(closeCodes.length).toBeGreaterThan(0);
    expect(closeCodes.filter((c) => !Object.hasOwn(PROTOCOL_ERROR_CODES, c))).toEqual([]);
    const withStatus = [
      ...[...readme.matchAll(/`([A-Z][A-Z_]+)` \((\d{3})\)/g)].map((m) => [m[1]!, Number(m[2])] as const),
      ...[...readme.matchAll(/`(\d{3}) ([A-Z][A-Z_]+)`/g)].map((m) => [m[2]!, Number(m[1])] as const),
    ];
    expect(withStatus.length).toBeGreaterThan(0);
    const wrong = withStatus.filter(([code, status]) => (API_ERRORS as Record<string, { status: number }>)[code]?.status !== status);
    expect(wrong).toEqual([]);
  });
});
