/**
 * The tenure code that the in-process benchmarks time: the built package in dist/ (which
 * `npm run bench` builds first), as users run it and as the election benchmarks' node processes
 * already run it. Imported through tsx, src/ would carry the name-keeping helper that tsx (esbuild)
 * wraps around every function, including each closure tenure makes per call: measured on this
 * machine at ~1.5 µs of ~13 µs of client CPU per Redis acquire + release with 16 in flight, a cost
 * no user pays. The types are src/'s (the two are built from the same source).
 */
import type * as CoreModule from '../../src/core/index.js';
import type * as LocksModule from '../../src/locks/index.js';
import type * as MysqlModule from '../../src/stores/mysql/index.js';
import type * as PostgresModule from '../../src/stores/postgres/index.js';
import type * as RaftCoreModule from '../../src/raft/core/index.js';
import type * as RaftTransportModule from '../../src/raft/transport/index.js';
import type * as RedisModule from '../../src/stores/redis/index.js';
import type * as RedisScriptsModule from '../../src/stores/redis/scripts.js';

async function load<T>(path: string): Promise<T> {
  const url = new URL(`../../dist/src/${path}`, import.meta.url).href;
  try {
    return (await import(url)) as T;
  } catch (err) {
    throw new Error(`cannot load the built tenure (${url}); run \`npm run build\` first (\`npm run bench\` does)`, { cause: err });
  }
}

export const { SeededRandom } = await load<typeof CoreModule>('core/index.js');
export type SeededRandom = CoreModule.SeededRandom;
export const { Lock, Redlock, quorumCounter, redisCounter } = await load<typeof LocksModule>('locks/index.js');
export type Lock = LocksModule.Lock;
export type Redlock = LocksModule.Redlock;
export const { RedisStore } = await load<typeof RedisModule>('stores/redis/index.js');
export type RedisStore = RedisModule.RedisStore;
/** The Redis store's Lua scripts (internal), for the benchmark that times them without the store's code. */
export const { acquireScript, releaseScript } = await load<typeof RedisScriptsModule>('stores/redis/scripts.js');
export const { MysqlStore } = await load<typeof MysqlModule>('stores/mysql/index.js');
export type MysqlStore = MysqlModule.MysqlStore;
export const { PostgresStore } = await load<typeof PostgresModule>('stores/postgres/index.js');
export type PostgresStore = PostgresModule.PostgresStore;
export const { MemoryStorage, NONE, RawNode } = await load<typeof RaftCoreModule>('raft/core/index.js');
export type MemoryStorage = RaftCoreModule.MemoryStorage;
export type RawNode = RaftCoreModule.RawNode;
import type * as RaftWalModule from '../../src/raft/wal/index.js';
export const { DurableStorage } = await load<typeof RaftWalModule>('raft/wal/index.js');
export type DurableStorage = RaftWalModule.DurableStorage;
export const { RaftTransport } = await load<typeof RaftTransportModule>('raft/transport/index.js');
export type RaftTransport = RaftTransportModule.RaftTransport;
import type * as RaftNodeModule from '../../src/raft/node/index.js';
export const { RaftNode } = await load<typeof RaftNodeModule>('raft/node/index.js');
import type * as RaftStoreModule from '../../src/stores/raft/index.js';
export const { openRaftStore } = await load<typeof RaftStoreModule>('stores/raft/index.js');
export type RaftStore = RaftStoreModule.RaftStore;
import type * as RootModule from '../../src/index.js';
/** Model B's follower, its sinks and the store opener, for the follow benchmark's catch-up and latency runs. */
export const { Follower, openStore, postgresSink, sqliteSink, mysqlSink } = await load<typeof RootModule>('index.js');
