/** `memory:` — one process, for tests and simulation. */
import type { StoreBackend } from '../backend.js';

export interface MemoryOpenOptions {
  kind: 'memory';
}

export const memoryBackend: StoreBackend<MemoryOpenOptions> = {
  kind: 'memory',
  schemes: ['memory'],
  shown: ['memory:'],
  parse: () => ({ kind: 'memory' }),
  async open() {
    const { MemoryStore } = await import('./index.js');
    return new MemoryStore();
  },
};
