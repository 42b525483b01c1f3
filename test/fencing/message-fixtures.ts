/**
 * Shared pieces of the fenced-message tests: a fresh PostgreSQL database per test holding the
 * consumer's ledger and the application's `applied` table, unique broker names per test, and a
 * consumer whose apply inserts the message into `applied` in the ledger's transaction.
 */
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { FencedConsumer, postgresDialect, sqlMessageLedger } from '../../src/fencing/index.js';
import type { FencedConsumerOptions, MessageVerdict, PgQueryable } from '../../src/fencing/index.js';
import { createPostgresDatabase } from '../stores/sql-servers.js';
import type { TestDatabase } from '../stores/sql-servers.js';

export function uniqueName(prefix: string): string {
  return `${prefix}_${randomBytes(5).toString('hex')}`;
}

export interface AppliedDb {
  readonly db: TestDatabase;
  readonly pool: pg.Pool;
  /** The payloads applied, in order. */
  applied(): Promise<string[]>;
  close(): Promise<void>;
}

export async function appliedDb(): Promise<AppliedDb> {
  const db = await createPostgresDatabase();
  const pool = new pg.Pool({ connectionString: db.url, max: 4 });
  pool.on('error', () => {});
  await pool.query('CREATE TABLE applied (id serial PRIMARY KEY, payload text NOT NULL, term bigint NOT NULL, pos bigint NOT NULL)');
  await sqlMessageLedger(postgresDialect, pool).createTable();
  return {
    db,
    pool,
    applied: async () => (await pool.query<{ payload: string }>('SELECT payload FROM applied ORDER BY id')).rows.map((r) => r.payload),
    close: async () => {
      await pool.end();
      await db.drop();
    },
  };
}

/** A consumer of `group` on `pool` whose apply inserts the payload `payloadOf(message)`; it records every verdict. */
export function appliedConsumer<M>(
  pool: pg.Pool,
  group: string,
  payloadOf: (m: M) => string,
  extra: Pick<FencedConsumerOptions<PgQueryable, M>, 'dedupe' | 'maxBatch'> = {},
): { consumer: FencedConsumer<PgQueryable, M>; verdicts: MessageVerdict[] } {
  const verdicts: MessageVerdict[] = [];
  const consumer = new FencedConsumer<PgQueryable, M>({
    ...extra,
    group,
    consumer: 'projector',
    ledger: sqlMessageLedger(postgresDialect, pool),
    apply: async (tx, m, fence) => {
      await tx.query('INSERT INTO applied (payload, term, pos) VALUES ($1, $2, $3)', [payloadOf(m), fence.token.term, fence.position]);
    },
    onSkip: (v) => verdicts.push(v),
  });
  return { consumer, verdicts };
}

/** The bad Fencing-Token values every broker's test sends, with what the refusal must say. */
export function badTokens(group: string): { name: string; value: string; reason: RegExp }[] {
  return [
    { name: 'garbled', value: 'not a token', reason: /Fencing-Token: expected GROUP#TERM such as billing#5, got "not a token"/ },
    { name: 'term -1', value: `${group}#-1`, reason: /Fencing-Token: the term must be digits only .*got "-1"/ },
    { name: 'term 0', value: `${group}#0`, reason: /Fencing-Token: the term must be in 1\.\.9007199254740991 without leading zeros, got "0"/ },
    { name: 'term 2^63', value: `${group}#9223372036854775808`, reason: /Fencing-Token: the term must be in 1\.\.9007199254740991 without leading zeros, got "9223372036854775808"/ },
    { name: "another group's token", value: 'other-group#7', reason: /Fencing-Token: is for group "other-group", this consumer fences group/ },
    { name: 'huge', value: `${'g'.repeat(20_000)}#1`, reason: /Fencing-Token: the Fencing-Token header is 20002 characters, at most 2417 allowed/ },
  ];
}
