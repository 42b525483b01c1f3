/**
 * Every store tenure has, as the contract and chaos suites run them. A new backend joins by one
 * line here: a name and a factory that opens a fresh, isolated store.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Store } from '../../src/core/index.js';
import { MemoryStore } from '../../src/stores/memory/index.js';
import { SqliteStore } from '../../src/stores/sqlite/index.js';

export interface Backend {
  readonly name: string;
  /** Open a fresh store with no leases or streams; `cleanup` removes whatever it made. */
  open(): Promise<{ store: Store; cleanup: () => Promise<void> }>;
}

function tempDir(prefix: string): { dir: string; remove: () => void } {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  return { dir, remove: () => rmSync(dir, { recursive: true, force: true }) };
}

export const backends: Backend[] = [
  { name: 'memory', open: async () => ({ store: new MemoryStore(), cleanup: async () => {} }) },
  {
    name: 'sqlite',
    open: async () => {
      const t = tempDir('tenure-contract-');
      const store = new SqliteStore({ path: join(t.dir, 'tenure.db') });
      return { store, cleanup: async () => { await store.close(); t.remove(); } };
    },
  },
];
