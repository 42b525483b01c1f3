/**
 * What a chaos backend entry provides. Only `name`, `faults` and `start` are required; the
 * optional hooks back the faults of the same name, and a fault is only scheduled when the entry
 * lists it in `faults` (and has its hook, where it needs one).
 */
import type { Random } from '../../../src/core/index.js';
import type { Endpoint } from '../proxy/index.js';

/**
 * - `pause`: SIGSTOP a node (a leader when there is one) past its TTL, then SIGCONT.
 * - `kill`: kill -9 a node and start a new incarnation of it.
 * - `slow`: `instance.slow(ms)` makes the store slow for a while (SQLite: a foreign write lock).
 * - `restart-store`: `instance.restart(downMs)` stops the private instance and starts it again.
 * - `kill-member`: `instance.members.kill(i)`, later `start(i)` (a Redis under Redlock, an etcd member).
 * - `cut`, `drop`, `blackhole`, `delay`, `one-way`: the proxies between one node and the store
 *   (needs `instance.endpoints`). `drop` resets the node's connections every 100–400 ms, so calls
 *   in flight lose their replies and the client reconnects at once. `tear` cuts the next chunk on
 *   each of the node's connections (a reply, or a quarter of the time a request) after 1–200 bytes
 *   and closes the connection, every 100–400 ms: the receiver holds half a message.
 */
export type FaultKind = 'pause' | 'kill' | 'resign' | 'slow' | 'restart-store' | 'kill-member' | 'cut' | 'drop' | 'blackhole' | 'delay' | 'one-way' | 'tear';

/** How the nodes get their fencing tokens: a LeaderElector on the store, or a Redlock. */
export type ChaosWorkload = 'elector' | 'redlock';

export const allFaultKinds: readonly FaultKind[] = ['pause', 'kill', 'resign', 'slow', 'restart-store', 'kill-member', 'cut', 'drop', 'blackhole', 'delay', 'one-way', 'tear'];

/** Faults that act on one node's connections through its proxies. */
export const proxyFaults: readonly FaultKind[] = ['cut', 'drop', 'blackhole', 'delay', 'one-way', 'tear'];

export interface ChaosStartContext {
  /** A fresh directory for this run (data files, logs); removed after a clean run. */
  readonly dir: string;
  /** The run's seeded randomness. */
  readonly random: Random;
  /** Progress and diagnostics. */
  readonly log: (line: string) => void;
}

export interface ChaosInstance {
  /**
   * The network addresses nodes connect to, in a fixed order ([] for an embedded store). The
   * runner starts one fault proxy per endpoint per node and passes the proxies' addresses, in the
   * same order, to `url`.
   */
  readonly endpoints: readonly Endpoint[];
  /** The store URL a node uses; `via` replaces `endpoints` (the node's proxies). */
  url(via?: readonly Endpoint[]): string;
  /**
   * Only when `url` is not a store (the `redlock` workload: `url` is a `redlock://` URL): the
   * store URL of the fenced streams, `via` as for `url`. Nodes get it through their proxies, and
   * the runner reads the streams from `streamUrl()` at the end.
   */
  streamUrl?(via?: readonly Endpoint[]): string;
  /**
   * Make the store slow for about `ms`. Resolves when it is fast again, with the interval it
   * really was slow (Date.now() values), or null when the fault could not be applied.
   */
  slow?(ms: number): Promise<{ from: number; to: number } | null>;
  /** Stop the private instance, wait `downMs`, start it again; resolves when it serves again. */
  restart?(downMs: number): Promise<void>;
  /** Members of a store made of several servers. */
  readonly members?: {
    readonly count: number;
    kill(index: number): Promise<void>;
    start(index: number): Promise<void>;
  };
  /** Stop everything the instance started (processes); the runner removes `dir`. */
  stop(): Promise<void>;
}

export interface ChaosBackend {
  /** As in `--store NAME`. */
  readonly name: string;
  /** The faults the nemesis may use on this store. */
  readonly faults: readonly FaultKind[];
  /** Lease TTL for the run (default 1500 ms). */
  readonly ttlMs?: number;
  /**
   * How long the CI run (chaos.test.ts) lasts, ms, when 22 s is too short for the store's TTL
   * (a run warms up for 3 TTLs and ends with a quiet TTL + 1.5 s): azblob's 15 s blob leases.
   */
  readonly ciDurationMs?: number;
  /**
   * The read router's bound on a follower's lag for the run, ms (default 1000). azblob: a lease's
   * age is known to the second only (the service's `Date` header), and the advert's age is
   * counted up to 1 s older than it is, so a 1 s bound would route no read to a follower.
   */
  readonly readMaxLagMs?: number;
  /**
   * What the nodes do (default `elector`): campaign with a LeaderElector on the store at `url`;
   * or `redlock`: take a Redlock at `url` (a `redlock://` URL) per group and append with its
   * fencing token to the store at `streamUrl` (test/fixtures/chaos-node.ts).
   */
  readonly workload?: ChaosWorkload;
  /**
   * A known bug in the store that this suite finds: `npm run chaos -- --store NAME` still runs
   * (and shows it), the CI run in chaos.test.ts is skipped with this text until it is fixed.
   */
  readonly knownIssue?: string;
  /** Why this backend cannot run on this machine (a server binary missing), or null when it can. */
  unavailable?(): string | null;
  /** Start a private, empty instance. */
  start(context: ChaosStartContext): Promise<ChaosInstance>;
}
