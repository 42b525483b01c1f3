/**
 * Issue 22, fenced messages on NATS JetStream: fenced publish + fenced consume vs plain publish +
 * plain consume, side by side in one run, on the JetStream server on this machine and a fresh
 * PostgreSQL database.
 *
 *  - plain: `js.publish` of each message (awaiting its PubAck), and a pull consumer that INSERTs
 *    each message into a table (autocommit) and then acks it: the same write, unfenced.
 *  - plain-tx: the same, the INSERT inside BEGIN … COMMIT (what an apply of more than one statement
 *    needs anyway): the round trips of a transaction, without the fence.
 *  - fenced: `publishFencedJetStream` (the token from the context, in the headers), and a
 *    FencedConsumer with `dedupe: 'id'` (FENCED_JETSTREAM_CONSUMER_BY_ID: many messages in flight)
 *    run by `consumeFencedJetStream`: the messages that arrived while one transaction ran are
 *    applied in the next, which locks the ledger row, reads which of their stream sequences are
 *    recorded as applied, checks each term, INSERTs each message into a table, records the
 *    sequences and advances the ledger, commits, then acks each.
 *
 * Each round publishes N messages through each variant in turn (the order reversed every other
 * round), each timed from the first publish to the last message applied
 * (its consumer runs all along, so consuming overlaps publishing); one throughput ratio per round.
 */
import { AckPolicy, connect } from 'nats';
import type { JsMsg } from 'nats';
import pg from 'pg';
import type * as FencingModule from '../src/fencing/index.js';
import type * as CoreModule from '../src/core/index.js';
import { msBetween, nowNs } from '../test/fixtures/harness.js';
import { freshPostgres, randomTag } from './lib/servers.js';
import { metric, opsPerSecond } from './lib/stats.js';
import type { BenchOptions, BenchResult, Benchmark } from './lib/types.js';

const ROUNDS = 20;
const PER_ROUND = 200;
const WARMUP = 200;
/** The fenced consumer's outstanding messages (FENCED_JETSTREAM_CONSUMER_BY_ID). */
const MAX_PENDING = 256;
const NATS_URL = process.env.TENURE_BENCH_NATS_URL ?? '127.0.0.1:4222';

/** The built tenure in dist/ (see lib/built.ts for why not src/ through tsx). */
async function built<T>(path: string): Promise<T> {
  const url = new URL(`../dist/src/${path}`, import.meta.url).href;
  try {
    return (await import(url)) as T;
  } catch (err) {
    throw new Error(`cannot load the built tenure (${url}); run \`npm run build\` first (\`npm run bench\` does)`, { cause: err });
  }
}

/** Resolves when `count()` reaches `n`; checked by the consumer loop after each message. */
class Counter {
  n = 0;
  private waiter: { target: number; resolve: () => void } | null = null;
  bump(): void {
    this.n++;
    if (this.waiter && this.n >= this.waiter.target) {
      const w = this.waiter;
      this.waiter = null;
      w.resolve();
    }
  }
  reach(target: number): Promise<void> {
    if (this.n >= target) return Promise.resolve();
    return new Promise((resolve) => (this.waiter = { target, resolve }));
  }
}

export function fencedNatsBenchmark(): Benchmark {
  const name = 'fenced-nats';
  const description =
    `On NATS JetStream with a PostgreSQL apply: fenced publish (the token in the headers) + fenced consume (ledger row locked, term and stream sequence checked, ` +
    `each message INSERTed, its stream sequence recorded and the ledger advanced in one transaction per batch of what arrived meanwhile, each acked after the commit; dedupe by id, up to ${MAX_PENDING} outstanding) vs plain publish + plain consume (INSERT autocommit, then ack) ` +
    `and vs plain with the INSERT in a transaction (BEGIN, INSERT, COMMIT, then ack), ` +
    `${ROUNDS} rounds of ${PER_ROUND} messages per variant, in turn; each timed from the first publish to the last message applied.`;
  return {
    name,
    description,
    tags: ['nats', 'postgres', 'fencing', 'messages'],
    async run(options: BenchOptions): Promise<BenchResult> {
      const started = nowNs();
      const fencing = await built<typeof FencingModule>('fencing/index.js');
      const core = await built<typeof CoreModule>('core/index.js');
      const db = await freshPostgres();
      const pool = new pg.Pool({ connectionString: db.url, max: 4 });
      pool.on('error', () => {});
      const nc = await connect({ servers: NATS_URL });
      const js = nc.jetstream();
      const jsm = await nc.jetstreamManager();
      const stream = `bench_fenced_${randomTag()}`;
      const stops: (() => Promise<unknown>)[] = [];
      try {
        await pool.query('CREATE TABLE plain_applied (id bigserial PRIMARY KEY, payload text NOT NULL)');
        await pool.query('CREATE TABLE tx_applied (id bigserial PRIMARY KEY, payload text NOT NULL)');
        await pool.query('CREATE TABLE fenced_applied (id bigserial PRIMARY KEY, payload text NOT NULL)');
        const sqlLedger = fencing.sqlMessageLedger(fencing.postgresDialect, pool);
        await sqlLedger.createTable();
        // The ledger, counting its batch transactions (for the notes).
        let batches = 0;
        const ledger: FencingModule.MessageLedger<FencingModule.PgQueryable> = {
          run: (c, g, step) => sqlLedger.run(c, g, step),
          runBatch: (c, g, positions, step) => {
            batches++;
            return sqlLedger.runBatch!(c, g, positions, step);
          },
        };
        await jsm.streams.add({ name: stream, subjects: [`${stream}.>`] });
        stops.push(() => jsm.streams.delete(stream));
        for (const v of ['plain', 'tx', 'fenced']) {
          // The fenced consumer dedupes by id: many outstanding (FENCED_JETSTREAM_CONSUMER_BY_ID); the plain ones take JetStream's default.
          const fenced = v === 'fenced' ? { max_ack_pending: fencing.FENCED_JETSTREAM_CONSUMER_BY_ID.max_ack_pending } : {};
          await jsm.consumers.add(stream, { durable_name: v, filter_subject: `${stream}.${v}`, ack_policy: AckPolicy.Explicit, ack_wait: 30_000_000_000, ...fenced });
        }

        const plainDone = new Counter();
        const plainMessages = await (await js.consumers.get(stream, 'plain')).consume({ max_messages: 256 });
        stops.push(() => plainMessages.close());
        void (async () => {
          for await (const m of plainMessages) {
            await pool.query('INSERT INTO plain_applied (payload) VALUES ($1)', [m.string()]);
            m.ack();
            plainDone.bump();
          }
        })();

        const txDone = new Counter();
        const txMessages = await (await js.consumers.get(stream, 'tx')).consume({ max_messages: 256 });
        stops.push(() => txMessages.close());
        void (async () => {
          for await (const m of txMessages) {
            const c = await pool.connect();
            try {
              await c.query('BEGIN');
              await c.query('INSERT INTO tx_applied (payload) VALUES ($1)', [m.string()]);
              await c.query('COMMIT');
            } finally {
              c.release();
            }
            m.ack();
            txDone.bump();
          }
        })();

        const fencedDone = new Counter();
        const consumer = new fencing.FencedConsumer<FencingModule.PgQueryable, JsMsg>({
          group: 'bench',
          consumer: 'projector',
          ledger,
          dedupe: 'id',
          apply: async (tx, m) => {
            await tx.query('INSERT INTO fenced_applied (payload) VALUES ($1)', [m.string()]);
          },
        });
        const fencedMessages = await (await js.consumers.get(stream, 'fenced')).consume({ max_messages: 256 });
        stops.push(() => fencedMessages.close());
        void fencing.consumeFencedJetStream(fencedMessages, consumer, { onSettled: () => fencedDone.bump() });

        const token = core.makeToken('bench', 1);
        const payload = (n: number): string => JSON.stringify({ order: n, amount: 100 + (n % 17) });
        let plainN = 0;
        let fencedN = 0;
        const plainRound = async (count: number): Promise<void> => {
          const target = plainDone.n + count;
          for (let i = 0; i < count; i++) await js.publish(`${stream}.plain`, payload(plainN++));
          await plainDone.reach(target);
        };
        let txN = 0;
        const txRound = async (count: number): Promise<void> => {
          const target = txDone.n + count;
          for (let i = 0; i < count; i++) await js.publish(`${stream}.tx`, payload(txN++));
          await txDone.reach(target);
        };
        const fencedRound = (count: number): Promise<void> =>
          fencing.runFenced({ token }, async () => {
            const target = fencedDone.n + count;
            for (let i = 0; i < count; i++) await fencing.publishFencedJetStream(js, `${stream}.fenced`, payload(fencedN++));
            await fencedDone.reach(target);
          });
        await plainRound(WARMUP);
        await txRound(WARMUP);
        await fencedRound(WARMUP);

        const variants = [
          { id: 'plain', round: plainRound, rate: [] as number[] },
          { id: 'tx', round: txRound, rate: [] as number[] },
          { id: 'fenced', round: fencedRound, rate: [] as number[] },
        ];
        const ratios: number[] = [];
        const txRatios: number[] = [];
        for (let r = 0; r < ROUNDS; r++) {
          const rate = new Map<string, number>();
          for (const v of r % 2 === 0 ? variants : [...variants].reverse()) {
            const t0 = nowNs();
            await v.round(PER_ROUND);
            const ops = opsPerSecond(PER_ROUND, msBetween(t0, nowNs()));
            v.rate.push(ops);
            rate.set(v.id, ops);
          }
          ratios.push(rate.get('fenced')! / rate.get('plain')!);
          txRatios.push(rate.get('fenced')! / rate.get('tx')!);
        }
        options.log(`${name}: ${ROUNDS} rounds done`);
        const [plainV, txV, fencedV] = variants as [(typeof variants)[0], (typeof variants)[0], (typeof variants)[0]];
        const count = async (table: string): Promise<number> => Number((await pool.query<{ n: string }>(`SELECT count(*) AS n FROM ${table}`)).rows[0]!.n);
        const notes = [
          `applied rows: plain ${await count('plain_applied')}, plain-tx ${await count('tx_applied')}, fenced ${await count('fenced_applied')} (each ${WARMUP + ROUNDS * PER_ROUND} published); fenced consumer verdicts ${JSON.stringify(consumer.counts)}`,
          `round trips to PostgreSQL: fenced 2 per batch (BEGIN + the ledger SELECT … FOR UPDATE + the batch's applied sequences; the sequences INSERTed + the ledger UPDATE + COMMIT) + 1 per message (its INSERT), one commit per batch (${consumer.counts.applied} applied in ${batches} batches); plain-tx 3 per message (BEGIN; the INSERT; COMMIT), plain 1 (the INSERT, autocommit); one commit per message each`,
        ];
        return {
          name,
          description,
          target: 'nats',
          params: { rounds: ROUNDS, perRound: PER_ROUND, warmup: WARMUP },
          metrics: [
            metric('plain-rate', 'plain publish + consume: messages per second, first publish to last applied (samples: rounds)', plainV.rate, undefined, 'ops/s'),
            metric('plain-tx-rate', 'plain publish + consume with the INSERT in BEGIN … COMMIT: messages per second (samples: rounds)', txV.rate, undefined, 'ops/s'),
            metric('fenced-rate', 'fenced publish + consume: messages per second, first publish to last applied (samples: rounds)', fencedV.rate, undefined, 'ops/s'),
            metric('fenced/plain', 'fenced throughput / plain throughput, in the same round', ratios, { stat: 'p50', min: 0.85, label: '0.85x' }, 'x'),
            metric('fenced/plain-tx', 'fenced throughput / plain-tx throughput, in the same round: the cost of the fence over a transactional apply', txRatios, undefined, 'x'),
          ],
          notes,
          durationMs: msBetween(started, nowNs()),
        };
      } finally {
        for (const s of stops.reverse()) await s().catch(() => undefined);
        await nc.close().catch(() => undefined);
        await pool.end().catch(() => undefined);
        await db.cleanup();
      }
    },
  };
}
