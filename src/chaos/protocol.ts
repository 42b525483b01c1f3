/**
 * What a chaos node process (src/chaos/node.ts) is started with, and what it tells its runner
 * over the IPC channel.
 */

export interface ChaosNodeConfig {
  /** The store's URL; for the `redlock` workload the `redlock://` URL of its servers. */
  readonly url: string;
  /**
   * `elector` (default): campaign with a LeaderElector on the store at `url`. `redlock`: per
   * group, take a Redlock at `url` (retrying until it is won), append with its fencing token to
   * the store at `streamUrl` while the lock's signal holds, release, take it again.
   */
  readonly workload?: 'elector' | 'redlock';
  /** The store of the fenced streams (the `redlock` workload only). */
  readonly streamUrl?: string;
  readonly node: string;
  readonly proc: string;
  readonly groups: readonly string[];
  readonly ttlMs: number;
  readonly history: string;
  /** Seeds this process's randomness (stalls, open retries). */
  readonly seed: number;
  /**
   * A deliberate bug, to prove the checker bites on a real run. `forge-token`: a node that does
   * not lead a group now and then reads the lease and writes with the holder's term (a client
   * that borrows the current token instead of holding the lease): two owners in one term.
   */
  readonly mutation?: 'forge-token';
}

export type ChaosNodeMessage =
  | { readonly type: 'ready'; readonly pid: number }
  | { readonly type: 'elected'; readonly group: string; readonly term: number; readonly owner: string }
  | { readonly type: 'deposed'; readonly group: string; readonly term: number; readonly reason: string }
  | { readonly type: 'fatal'; readonly error: string };
