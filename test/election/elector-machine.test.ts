/**
 * The elector's pure state machine, driven through the text scenarios in testdata/ (the format of
 * test/raft/testdata; see elector-interaction.ts for the commands). Rewrite the expected outputs
 * with DATADRIVEN_REWRITE=1 (or RAFT_REWRITE=1), then read the diff.
 */
import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { rewrite, runFile } from '../raft/datadriven.js';
import { ElectorEnv } from './elector-interaction.js';

const dir = join(import.meta.dirname, 'testdata');
const files = readdirSync(dir).filter((f) => f.endsWith('.txt')).sort();

describe('elector machine scenarios', () => {
  it('has at least 20 scenario files', () => {
    expect(files.length).toBeGreaterThanOrEqual(20);
  });
  for (const f of files) {
    it(f.replace(/\.txt$/, ''), () => {
      const env = new ElectorEnv();
      const { mismatches, panics } = runFile(join(dir, f), (command) => env.run(command));
      expect(panics).toEqual([]);
      if (rewrite) return;
      for (const m of mismatches) expect(m.actual, `${f}:${m.case.line}: ${m.case.command}`).toBe(m.case.expected);
    });
  }
});
