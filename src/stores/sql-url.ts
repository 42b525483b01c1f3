/**
 * `postgres://user:pass@host:port/db[?prefix=P&handover=off&sslmode=…]` or `mysql://…/db[?prefix=P]`:
 * `prefix` is the table prefix (default `tenure_`); PostgreSQL's `handover` (`on`, the default, or
 * `off`) is the store's `handOver` option; everything else goes to the driver as given.
 */
import { InvalidArgumentError, redactUrl } from '../core/index.js';

export interface SqlUrlOptions {
  url: string;
  tablePrefix?: string;
  handOver?: boolean;
}

export function parseSqlUrl(kind: 'postgres' | 'mysql', url: string): SqlUrlOptions {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    throw new InvalidArgumentError('store', `expected ${kind}://user@host:port/database, got '${redactUrl(url)}'`);
  }
  if (parsed.hostname === '') throw new InvalidArgumentError('store', `${kind} needs a host, such as ${kind}://127.0.0.1/tenure, got '${redactUrl(url)}'`);
  const tablePrefix = parsed.searchParams.get('prefix');
  parsed.searchParams.delete('prefix');
  const handover = parsed.searchParams.get('handover');
  parsed.searchParams.delete('handover');
  if (handover !== null && (kind !== 'postgres' || (handover !== 'on' && handover !== 'off'))) {
    throw new InvalidArgumentError('store', kind === 'postgres' ? `handover must be on or off, got '${handover}'` : 'handover applies to postgres:// stores only (MySQL has no push)');
  }
  return {
    url: parsed.toString(),
    ...(tablePrefix !== null ? { tablePrefix } : {}),
    ...(handover !== null ? { handOver: handover === 'on' } : {}),
  };
}
