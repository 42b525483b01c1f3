/**
 * The few calls tenure needs from `pg`, typed structurally so that a user's own `pg.Pool` fits and
 * so that tenure's published types do not require `@types/pg`. The driver is loaded only when a
 * store is opened from a URL; a missing package is a DriverMissingError.
 */
import { loadDriver } from '../../core/driver.js';

export interface PgQueryResult {
  readonly rows: Record<string, unknown>[];
  readonly rowCount: number | null;
}

/** Anything that runs a parameterized query: a `pg.Pool`, `pg.Client` or `pg.PoolClient`. */
export interface PgQueryable {
  query(text: string, values?: unknown[]): Promise<PgQueryResult>;
}

export interface PgNotification {
  readonly channel: string;
  readonly payload?: string | undefined;
}

/** A statement with a name: `pg` prepares it once per connection and then only binds and runs it. */
export interface PgQueryConfig {
  readonly name?: string;
  readonly text: string;
  readonly values?: unknown[];
}

/** A client checked out of a pool (`pg.PoolClient`). */
export interface PgPoolClient extends PgQueryable {
  query(text: string, values?: unknown[]): Promise<PgQueryResult>;
  query(config: PgQueryConfig): Promise<PgQueryResult>;
  release(destroy?: boolean | Error): void;
  on(event: 'notification', listener: (message: PgNotification) => void): unknown;
  on(event: 'error', listener: (err: Error) => void): unknown;
  on(event: 'end', listener: () => void): unknown;
  removeListener(event: 'error', listener: (err: Error) => void): unknown;
}

/** A `pg.Pool`, or anything shaped like it. */
export interface PgPool extends PgQueryable {
  connect(): Promise<PgPoolClient>;
  end(): Promise<void>;
  on?(event: 'error', listener: (err: Error) => void): unknown;
  on?(event: 'connect', listener: (client: PgPoolClient) => void): unknown;
  /** pg.Pool keeps its config here; used only to name host:port in error messages. */
  readonly options?: { readonly host?: string | undefined; readonly port?: number | undefined; readonly connectionString?: string | undefined };
}

interface PgModule {
  Pool: new (config: Record<string, unknown>) => PgPool;
}


export function loadPg(): PgModule {
  return loadDriver<PgModule>('pg', 'postgres');
}
