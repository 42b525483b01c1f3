/**
 * The chaos run's observer of replication: while the nemesis runs, it samples every follower's
 * projection (the rows added since its last look), reads each followed group's log head, and
 * serves reads through a ReadRouter, recording what each read claimed and returned. The checker
 * (`checkReplication`) judges the records after the run.
 *
 * It runs in the runner's process with its own store connection (no fault proxy: the observer
 * sees what the store holds, not what a cut-off node sees); store-level faults (a restart) make
 * its calls fail for a while, which only costs samples.
 */
import type BetterSqlite from 'better-sqlite3';
import { existsSync } from 'node:fs';
import { openStore } from '../../src/open.js';
import type { TenureStore } from '../../src/open.js';
import { ReadRouter } from '../../src/replication/index.js';
import { streamOf } from '../fixtures/chaos-history.js';
import { openTestSqlite } from '../fixtures/sqlite-compat.js';
import type { HeadObservation, ProjectionRow, ProjectionSample, RouterRead } from './checker.js';

export interface ObservedFollower {
  readonly id: string;
  readonly group: string;
  readonly projection: string;
}

export interface ObserverOptions {
  readonly storeUrl: string;
  readonly followers: readonly ObservedFollower[];
  /** The threshold every read is routed with, ms. */
  readonly maxLagMs: number;
  /** Between two rounds (samples, heads, one read per group), ms. */
  readonly everyMs: number;
}

/** At most this many rows are read from one projection per sample; the rest wait for the next. */
const SAMPLE_ROWS = 5000;

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, Math.max(0, ms)));

export class ReplicationObserver {
  readonly samples: ProjectionSample[] = [];
  readonly heads: HeadObservation[] = [];
  readonly reads: RouterRead[] = [];
  /** Reads that failed (no follower within the threshold and no leader, the store unreachable). */
  unserved = 0;
  private readonly seen = new Map<string, number>();
  private readonly dbs = new Map<string, BetterSqlite.Database>();
  private readonly groups: string[];
  private store: TenureStore | null = null;
  private routers = new Map<string, ReadRouter>();
  private stopping = false;
  private loop: Promise<void> | null = null;

  constructor(private readonly options: ObserverOptions) {
    this.groups = [...new Set(options.followers.map((f) => f.group))];
  }

  async start(): Promise<void> {
    if (this.options.followers.length === 0) return;
    this.store = await openStore(this.options.storeUrl);
    for (const g of this.groups) this.routers.set(g, new ReadRouter({ store: this.store, group: g }));
    this.loop = this.run();
  }

  /** Stop the rounds (the followers keep running); `finalSample` after they stopped. */
  async stop(): Promise<void> {
    this.stopping = true;
    await this.loop;
  }

  /** One last look at every projection, after the followers stopped. */
  finalSample(): void {
    for (const f of this.options.followers) this.sample(f);
  }

  async close(): Promise<void> {
    for (const db of this.dbs.values()) db.close();
    this.dbs.clear();
    await this.store?.close().catch(() => {});
  }

  private async run(): Promise<void> {
    while (!this.stopping) {
      const round = Date.now();
      for (const f of this.options.followers) this.sample(f);
      for (const g of this.groups) {
        await this.readHead(g);
        await this.read(g);
      }
      await sleep(round + this.options.everyMs - Date.now());
    }
  }

  private db(path: string): BetterSqlite.Database | null {
    let db = this.dbs.get(path);
    if (!db) {
      if (!existsSync(path)) return null; // the follower has not made it yet
      db = openTestSqlite(path, { readonly: true });
      this.dbs.set(path, db);
    }
    return db;
  }

  private sample(f: ObservedFollower): void {
    const db = this.db(f.projection);
    if (!db) return;
    let total: number;
    let rows: ProjectionRow[];
    const before = this.seen.get(f.id) ?? 0;
    try {
      // One read transaction, so the count and the new rows are of the same instant.
      const read = db.transaction(() => {
        const count = (db.prepare('SELECT count(*) AS n FROM applied').get() as { n: number }).n;
        const added = db.prepare('SELECT seq, term, payload FROM applied WHERE pos > ? ORDER BY pos LIMIT ?').all(before, SAMPLE_ROWS) as ProjectionRow[];
        return { count, added };
      });
      ({ count: total, added: rows } = read());
    } catch (err) {
      if (/no such table/.test((err as Error).message)) return;
      throw err;
    }
    // A sample cut at SAMPLE_ROWS is told as the rows it holds; the next one goes on.
    if (rows.length === SAMPLE_ROWS && before + rows.length < total) total = before + rows.length;
    this.samples.push({ follower: f.id, group: f.group, at: Date.now(), total, rows });
    this.seen.set(f.id, total);
  }

  private async readHead(group: string): Promise<void> {
    try {
      const last = await this.store!.readLast!(streamOf(group));
      this.heads.push({ group, at: Date.now(), head: last?.seq ?? 0 });
    } catch {
      // the store is restarting: no observation this round
    }
  }

  private async read(group: string): Promise<void> {
    const sentAt = Date.now();
    try {
      const r = await this.routers.get(group)!.read(
        async (target) => {
          if (target.role === 'leader') return (await this.store!.readLast!(streamOf(group)))?.seq ?? 0;
          const db = target.endpoint === null ? null : this.db(target.endpoint);
          if (!db) throw new Error(`follower ${target.nodeId} advertises no readable projection (${target.endpoint})`);
          return (db.prepare('SELECT coalesce(max(seq), 0) AS seq FROM applied').get() as { seq: number }).seq;
        },
        { maxLagMs: this.options.maxLagMs },
      );
      this.reads.push({ group, sentAt, maxLagMs: this.options.maxLagMs, role: r.target.role, nodeId: r.target.nodeId, lagMs: r.lagMs, seq: r.value });
    } catch {
      this.unserved++;
    }
  }
}
