/**
 * `tenure demo-follower` (internal): one follower of `tenure demo --scenario followers`. It tails
 * the demo's stream with a Follower whose sink is a SQLite file of its own (the projection: one
 * row per applied entry, committed with the offset in one transaction), and advertises its lag
 * with a LagAdvert so the demo's ReadRouter can route reads to it. It reports JSON lines on stdout.
 *
 * On SIGUSR2 it stops itself with SIGSTOP inside the next apply: the entry's row is inserted, the
 * transaction is open, the offset not committed. The demo then kills it (kill -9) and starts it
 * again: the transaction is rolled back with the process, and the new process applies that entry
 * again, once. The projection has no unique key on seq, so a second apply would show as a duplicate.
 */
import { InvalidArgumentError, checkName, checkOwner } from '../core/index.js';
import type { StreamEntry } from '../core/index.js';
import { Follower, LagAdvert, sqliteSink } from '../replication/index.js';
import { openDatabase } from '../stores/sqlite/driver.js';
import type { SqliteDatabase } from '../stores/sqlite/driver.js';
import { durationOption, parseCommand, renderHelp, stringOption } from './args.js';
import type { CommandSpec } from './args.js';
import { demoProcessLife, sayLine } from './demo-node.js';
import type { CliIO } from './output.js';
import { STORE_OPTION, openCliStore, storeTarget } from './store.js';

export const demoFollowerSpec: CommandSpec = {
  name: 'demo-follower',
  hidden: true,
  usage: 'demo-follower --store URL --group G --stream S --id ID --projection FILE [--advert-ttl D]',
  summary: 'One follower of `tenure demo --scenario followers` (internal; reports JSON lines on stdout).',
  options: {
    store: STORE_OPTION,
    group: { type: 'string', value: 'G', help: 'the group: the follower advertises its lag under G/followers/' },
    stream: { type: 'string', value: 'S', help: 'the stream to follow' },
    id: { type: 'string', value: 'ID', help: 'node id' },
    projection: { type: 'string', value: 'FILE', help: 'the SQLite file of the projection (created if missing)' },
    'advert-ttl': { type: 'string', value: 'D', help: 'the lag advert lease\'s TTL (default 1s)' },
    'demo-dir': { type: 'string', value: 'DIR', help: 'the demo\'s temporary directory, cleaned up if the demo dies' },
  },
  required: ['store', 'group', 'stream', 'id', 'projection'],
  examples: ['tenure demo-follower --store sqlite:/tmp/demo.db --group demo --stream demo --id follower-1 --projection /tmp/f1.db'],
};

/** The projection: one row per applied entry, in the order applied. */
export const PROJECTION_TABLE = 'demo_projection';

export type DemoFollowerEvent =
  | { event: 'following'; owner: string; pid: number; appliedSeq: number }
  | { event: 'lag'; appliedSeq: number; lagEntries: number; lagMs: number }
  | { event: 'mid-apply'; seq: number }
  | { event: 'follower-failed'; message: string }
  | { event: 'stopped' };

/** A projection row as the demo compares it with the log. */
export interface ProjectionRow {
  readonly seq: number;
  readonly term: number;
  readonly payload: string;
}

/** Open the projection file (created if missing), WAL so that the demo reads it while the follower writes. */
export function openProjection(path: string, busyTimeoutMs: number): SqliteDatabase {
  const { db } = openDatabase(path);
  try {
    db.exec(`PRAGMA busy_timeout = ${Math.max(0, Math.round(busyTimeoutMs))}`);
    db.exec('PRAGMA journal_mode = WAL');
    db.exec(`CREATE TABLE IF NOT EXISTS ${PROJECTION_TABLE} (row INTEGER PRIMARY KEY AUTOINCREMENT, seq INTEGER NOT NULL, term INTEGER NOT NULL, payload TEXT NOT NULL)`);
  } catch (err) {
    db.close();
    throw err;
  }
  return db;
}

/** The projection's rows in the order they were applied. */
export function readProjection(db: SqliteDatabase): ProjectionRow[] {
  return db
    .prepare(`SELECT seq, term, payload FROM ${PROJECTION_TABLE} ORDER BY row`)
    .all()
    .map((r) => ({ seq: Number(r.seq), term: Number(r.term), payload: String(r.payload) }));
}

/** The last seq in the projection (0 when empty): what a read served by this follower sees. */
export function projectionHead(db: SqliteDatabase): number {
  return Number(db.prepare(`SELECT COALESCE(MAX(seq), 0) AS seq FROM ${PROJECTION_TABLE}`).get()?.seq ?? 0);
}

export async function demoFollowerCommand(argv: readonly string[], io: CliIO): Promise<number> {
  const args = parseCommand(demoFollowerSpec, argv);
  if (args.help) {
    io.stdout.write(renderHelp(demoFollowerSpec));
    return 0;
  }
  const { values } = args;
  const group = checkName('--group', stringOption(values, 'group'));
  const stream = checkName('--stream', stringOption(values, 'stream'));
  const id = checkOwner('--id', stringOption(values, 'id'));
  const path = stringOption(values, 'projection');
  if (path === undefined || path === '') throw new InvalidArgumentError('--projection', 'expected a file');
  const advertTtlMs = durationOption(values, 'advert-ttl', 1000, 30, 60_000);
  const store = await openCliStore(storeTarget(stringOption(values, 'store'), io.env));
  const db = openProjection(path, 1000);
  const insert = db.prepare(`INSERT INTO ${PROJECTION_TABLE} (seq, term, payload) VALUES (?, ?, ?)`);

  let stopMidApply = false;
  process.on('SIGUSR2', () => (stopMidApply = true));
  const apply = (e: StreamEntry): void => {
    insert.run(e.seq, e.term, e.payload);
    if (stopMidApply) {
      stopMidApply = false;
      // The row is in, the offset not moved, the transaction open: the demo kills us here.
      say({ event: 'mid-apply', seq: e.seq });
      process.kill(process.pid, 'SIGSTOP');
    }
  };
  const follower = new Follower({ store, stream, sink: sqliteSink(db), apply, batchSize: 50, pollMs: 20 });
  const advert = new LagAdvert({ store, group, nodeId: id, follower, ttlMs: advertTtlMs, refreshMs: Math.max(10, Math.floor(advertTtlMs / 5)) });
  advert.on('published', ({ advert: a }) => say({ event: 'lag', appliedSeq: a.appliedSeq, lagEntries: a.lagEntries, lagMs: a.lagMs }));

  const life = demoProcessLife();
  // The rows are committed with the offset, so the projection's head is where this process goes on from.
  const resumeAfter = projectionHead(db);
  let code = 0;
  const running = follower.start().catch((err: unknown) => {
    code = 1;
    say({ event: 'follower-failed', message: err instanceof Error ? err.message : String(err) });
  });
  const advertising = advert.start();
  say({ event: 'following', owner: advert.owner, pid: process.pid, appliedSeq: resumeAfter });
  await Promise.race([life.stopped, running]);
  await follower.stop();
  await advert.stop();
  await advertising;
  await store.close();
  db.close();
  life.cleanUp(stringOption(values, 'demo-dir'));
  say({ event: 'stopped' });
  return code;
}

function say(event: DemoFollowerEvent): void {
  sayLine(event);
}
