/** `mysql://…` — MySQL and MariaDB; the URL is read by `stores/sql-url.ts`. */
import type { StoreBackend } from '../backend.js';
import { parseSqlUrl } from '../sql-url.js';

export interface MysqlOpenOptions {
  kind: 'mysql';
  url: string;
  tablePrefix?: string;
}

export const mysqlBackend: StoreBackend<MysqlOpenOptions> = {
  kind: 'mysql',
  schemes: ['mysql'],
  shown: ['mysql://'],
  // parseSqlUrl refuses `handover` for MySQL, so no handOver comes back.
  parse: ({ url }) => ({ kind: 'mysql', ...parseSqlUrl('mysql', url) }),
  async open(options) {
    const { MysqlStore } = await import('./index.js');
    return new MysqlStore(options);
  },
};
