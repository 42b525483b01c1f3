/** `sqlite:PATH` — the embedded default: many processes on one host share one file. */
import { InvalidArgumentError, redactUrl } from '../../core/index.js';
import type { StoreBackend } from '../backend.js';

export interface SqliteOpenOptions {
  kind: 'sqlite';
  path: string;
  timeoutMs?: number;
  busyTimeoutMs?: number;
  pollMs?: number;
  readOnly?: boolean;
}

export const sqliteBackend: StoreBackend<SqliteOpenOptions> = {
  kind: 'sqlite',
  schemes: ['sqlite'],
  shown: ['sqlite:PATH'],
  parse({ given, rest }) {
    // sqlite:PATH, sqlite:///abs/path and sqlite://./rel all name a file.
    const path = rest.startsWith('//') ? rest.slice(2) : rest;
    if (path === '') throw new InvalidArgumentError('store', `sqlite needs a file path, such as sqlite:./.tenure/tenure.db, got '${redactUrl(given)}'`);
    // Options as other stores' URLs take them (`?prefix=`) would otherwise become part of the
    // file's name: a database nobody meant, with the default tables.
    const q = path.indexOf('?');
    if (q >= 0) {
      // The option names only: a value may be a secret.
      const names = [...new URLSearchParams(path.slice(q + 1)).keys()].map((k) => `'${k}'`).join(', ') || 'nothing';
      throw new InvalidArgumentError('store', `sqlite:PATH takes no options, got ${names} after '?' (a file name with '?' is not supported)`);
    }
    return { kind: 'sqlite', path };
  },
  async open(options) {
    const { SqliteStore } = await import('./index.js');
    return new SqliteStore(options);
  },
};
