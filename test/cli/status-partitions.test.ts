/**
 * `tenure status --partitions NAME` (in process, through the CLI's main): shard ownership per
 * node of a live partition set on SQLite, as text and JSON; bad input is one line and exit 2.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { afterEach, describe, expect, it } from 'vitest';
import { main } from '../../src/cli/main.js';
import { Partitions } from '../../src/election/index.js';
import { SqliteStore } from '../../src/stores/sqlite/index.js';

function sink(): { stream: Writable; text: () => string } {
  let text = '';
  return {
    stream: new Writable({
      write(chunk: Buffer, _enc, done) {
        text += chunk.toString();
        done();
      },
    }),
    text: () => text,
  };
}

async function cli(argv: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  const out = sink();
  const err = sink();
  const code = await main(argv, { stdout: out.stream, stderr: err.stream, env: {} });
  return { code, stdout: out.text(), stderr: err.text() };
}

const cleanups: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

describe('tenure status --partitions', () => {
  it('shows each node\'s shards, as text and as JSON', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'tenure-status-parts-'));
    cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
    const path = join(dir, 'tenure.db');
    const store = new SqliteStore({ path });
    cleanups.push(() => store.close());
    const a = new Partitions({ store, id: 'node-a', shards: 6, name: 'orders', ttlMs: 5000 });
    const b = new Partitions({ store, id: 'node-b', shards: 6, name: 'orders', ttlMs: 5000 });
    cleanups.push(() => a.stop(), () => b.stop());
    await a.start();
    await b.start();
    const start = performance.now();
    while (a.held.length + b.held.length !== 6 || a.held.length !== 3) {
      if (performance.now() - start > 10_000) throw new Error(`not balanced: ${a.held} / ${b.held}`);
      await new Promise((r) => setTimeout(r, 20));
    }
    const json = await cli(['status', '--store', `sqlite:${path}`, '--partitions', 'orders', '--json']);
    expect(json.code, json.stderr).toBe(0);
    expect(JSON.parse(json.stdout)).toEqual({
      name: 'orders',
      nodes: [
        { id: 'node-a', member: true, shards: a.held.sort((x, y) => Number(x) - Number(y)) },
        { id: 'node-b', member: true, shards: b.held.sort((x, y) => Number(x) - Number(y)) },
      ],
    });
    const text = await cli(['status', '--store', `sqlite:${path}`, '--partitions', 'orders']);
    expect(text.code).toBe(0);
    const lines = text.stdout.trim().split('\n');
    expect(lines[0]).toBe('partitions orders: 2 member(s), 6 shard(s) led');
    expect(lines[1]).toMatch(/^NODE\s+MEMBER\s+SHARDS\s+LEADS$/);
    expect(lines[2]).toMatch(new RegExp(`^node-a\\s+yes\\s+3\\s+${a.held.join(',')}$`));
    expect(lines[3]).toMatch(new RegExp(`^node-b\\s+yes\\s+3\\s+${b.held.join(',')}$`));
  });

  it('bad input: one line on stderr, exit 2', async () => {
    for (const argv of [
      ['status', '--store', 'memory:', '--partitions', ''],
      ['status', '--store', 'memory:', '--partitions', 'x', '--group', 'g'],
    ]) {
      const r = await cli(argv);
      expect(r.code, JSON.stringify(argv)).toBe(2);
      expect(r.stderr.trim().split('\n')).toHaveLength(1);
      expect(r.stdout).toBe('');
    }
  });
});
