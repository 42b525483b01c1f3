/** `memory:` — one process, for tests and simulation. */
import { InvalidArgumentError, redactUrl } from '../../core/index.js';
import type { StoreBackend } from '../backend.js';

export interface MemoryOpenOptions {
  kind: 'memory';
}

export const memoryBackend: StoreBackend<MemoryOpenOptions> = {
  kind: 'memory',
  schemes: ['memory'],
  shown: ['memory:'],
  parse({ given, rest }) {
    if (rest !== '' && rest !== '//') throw new InvalidArgumentError('store', `memory: takes nothing after the colon, got '${redactUrl(given)}'`);
    return { kind: 'memory' };
  },
  async open() {
    const { MemoryStore } = await import('./index.js');
    return new MemoryStore();
  },
};
