import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { rewrite, runFile } from './datadriven.js';
import { InteractionEnv, parseCommand } from './interaction.js';

const dir = join(import.meta.dirname, 'testdata');
const files = readdirSync(dir).filter((f) => f.endsWith('.txt')).sort();

describe('raft interaction scenarios', () => {
  it('has scenario files', () => {
    expect(files.length).toBeGreaterThan(0);
  });
  for (const f of files) {
    it(f.replace(/\.txt$/, ''), () => {
      const env = new InteractionEnv();
      const { mismatches, panics } = runFile(join(dir, f), (command) => env.run(parseCommand(command)));
      // A panic is a bug in the core or the scenario, never an expected output.
      expect(panics).toEqual([]);
      if (rewrite) return;
      for (const m of mismatches) {
        expect(m.actual, `${f}:${m.case.line}: ${m.case.command}`).toBe(m.case.expected);
      }
    });
  }
});
