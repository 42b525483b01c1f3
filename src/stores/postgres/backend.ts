/** `postgres://…` (or `postgresql://…`) — PostgreSQL; the URL is read by `stores/sql-url.ts`. */
import type { StoreBackend } from '../backend.js';
import { parseSqlUrl } from '../sql-url.js';

export interface PostgresOpenOptions {
  kind: 'postgres';
  url: string;
  tablePrefix?: string;
  handOver?: boolean;
}

export const postgresBackend: StoreBackend<PostgresOpenOptions> = {
  kind: 'postgres',
  schemes: ['postgres', 'postgresql'],
  shown: ['postgres://'],
  parse: ({ url }) => ({ kind: 'postgres', ...parseSqlUrl('postgres', url) }),
  async open(options) {
    const { PostgresStore } = await import('./index.js');
    return new PostgresStore(options);
  },
};
