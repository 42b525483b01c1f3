/**
 * `tenure chaos` reads every node's history file after the run. A fast store (Redis: about 250,000
 * appends in a 20 s run) leaves more records in one file than a call may take as arguments, and
 * `out.push(...records)` threw RangeError (Maximum call stack size exceeded): the run ended as
 * "could not go on" with nothing checked.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { readHistories } from '../../src/chaos/harness.js';

const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

describe('chaos history files', () => {
  it('reads a file of 300,000 records whole, and the files in name order, a torn last line skipped', () => {
    const dir = mkdtempSync(join(tmpdir(), 'tenure-history-'));
    dirs.push(dir);
    const many = 300_000;
    writeFileSync(join(dir, 'n1.0.jsonl'), Array.from({ length: many }, (_, i) => JSON.stringify({ n: 'n1', i })).join('\n') + '\n');
    writeFileSync(join(dir, 'n2.0.jsonl'), `${JSON.stringify({ n: 'n2', i: 0 })}\n{"n":"n2","i":`); // cut by kill -9
    writeFileSync(join(dir, 'notes.txt'), 'not a history');
    const records = readHistories(dir) as unknown as { n: string; i: number }[];
    expect(records).toHaveLength(many + 1);
    expect(records[0]).toEqual({ n: 'n1', i: 0 });
    expect(records[many - 1]).toEqual({ n: 'n1', i: many - 1 });
    expect(records[many]).toEqual({ n: 'n2', i: 0 });
  });
});
