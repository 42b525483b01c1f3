/**
 * Client histories of the Raft store's lease and stream operations, recorded by the fault tests
 * (invoke and complete times on the test's monotonic clock, results), and their translation into
 * the register histories that the simulator's linearizability checker
 * (test/sim/raft/linearizability.ts) decides.
 *
 * The model, one register per key:
 *  - `lease:NAME` holds `term * OWNERS + owner` (owner 0: free). The workload's TTL is far longer
 *    than any run, so a lease changes only by acquire and release: an acquire that gets term T
 *    is `cas((T-1)*OWNERS + 0 -> T*OWNERS + me)` (terms rise by one per new holder, and only a free
 *    lease is granted), a refused acquire and a read that sees a holder read the register, a
 *    renew is `cas(X -> X)` with X = our term and owner (true: renewed, false: not ours), a
 *    release is `cas(X -> T*OWNERS + 0)`. A read that finds the lease free names no term and is
 *    left out; an ambiguous renew changes nothing and is left out.
 *  - `stream:NAME` holds the stream's head: an append acknowledged at seq n is `cas(n-1 -> n)`,
 *    an ambiguous append found in the final stream at seq n is that cas with an unknown outcome
 *    and return (it took effect some time after its call), one not found is left out (it never
 *    took effect), and a stream head read reads it. Appends refused as stale are left out here
 *    and checked on their own (`checkStreams`: not in the stream).
 * An acquire or release whose answer was lost is retried by the same client until one answer
 * comes; the retries form one operation from the first call to the last return (its effect,
 * once, fell somewhere in between).
 */
import { checkHistory, describeCounterexample, type CheckResult, type Operation } from '../../sim/raft/linearizability.js';
import type { ProcessCluster, Outcome } from './process-cluster.js';

/** Owner numbers are below this; a lease register's value is term * OWNERS + owner. */
export const OWNERS = 64;

export type HistoryOp =
  | { readonly kind: 'acquire'; readonly client: number; readonly name: string; readonly call: number; readonly ret: number; readonly acquired: boolean; readonly owner: number; readonly term: number }
  | { readonly kind: 'renew'; readonly client: number; readonly name: string; readonly term: number; readonly call: number; readonly ret: number | undefined; readonly renewed: boolean | undefined }
  | { readonly kind: 'release'; readonly client: number; readonly name: string; readonly term: number; readonly call: number; readonly ret: number; readonly released: boolean | undefined }
  | {
      readonly kind: 'append';
      readonly client: number;
      readonly stream: string;
      readonly payload: string;
      readonly call: number;
      readonly ret: number | undefined;
      /** ok: acknowledged at `seq`; stale: refused with STALE_TERM; ambiguous: unknown. */
      readonly result: { readonly kind: 'ok'; readonly seq: number } | { readonly kind: 'stale' } | { readonly kind: 'ambiguous' };
    }
  | { readonly kind: 'read'; readonly client: number; readonly name: string; readonly call: number; readonly ret: number; readonly holder: { readonly owner: number; readonly term: number } | null }
  | { readonly kind: 'head'; readonly client: number; readonly stream: string; readonly call: number; readonly ret: number; readonly seq: number };

export interface FinalEntry {
  readonly seq: number;
  readonly payload: string;
}

/** The owner string of client `c` and back. */
export const ownerOf = (client: number): string => `client-${client}`;
export function ownerNumber(owner: string): number {
  const m = /^client-(\d+)$/.exec(owner);
  if (m === null || Number(m[1]) <= 0 || Number(m[1]) >= OWNERS) throw new Error(`unexpected lease owner ${JSON.stringify(owner)}`);
  return Number(m[1]);
}

/** The register history of `ops`, given each stream's final content (to place ambiguous appends). */
export function toOperations(ops: readonly HistoryOp[], streams: ReadonlyMap<string, readonly FinalEntry[]>): Operation[] {
  const out: Operation[] = [];
  const at = new Map<string, Map<string, number>>();
  for (const [stream, entries] of streams) at.set(stream, new Map(entries.map((e) => [e.payload, e.seq])));
  const push = (o: Omit<Operation, 'id'>): void => {
    out.push({ ...o, id: out.length });
  };
  for (const o of ops) {
    switch (o.kind) {
      case 'acquire': {
        const key = `lease:${o.name}`;
        if (o.acquired) push({ client: o.client, key, op: { kind: 'cas', expected: (o.term - 1) * OWNERS, value: o.term * OWNERS + o.owner }, output: true, call: o.call, ret: o.ret });
        else push({ client: o.client, key, op: { kind: 'read' }, output: o.term * OWNERS + o.owner, call: o.call, ret: o.ret });
        break;
      }
      case 'renew': {
        if (o.renewed === undefined) break;
        const mine = o.term * OWNERS + o.client;
        push({ client: o.client, key: `lease:${o.name}`, op: { kind: 'cas', expected: mine, value: mine }, output: o.renewed, call: o.call, ret: o.ret });
        break;
      }
      case 'release':
        push({ client: o.client, key: `lease:${o.name}`, op: { kind: 'cas', expected: o.term * OWNERS + o.client, value: o.term * OWNERS }, output: o.released, call: o.call, ret: o.ret });
        break;
      case 'append': {
        const key = `stream:${o.stream}`;
        if (o.result.kind === 'ok') {
          push({ client: o.client, key, op: { kind: 'cas', expected: o.result.seq - 1, value: o.result.seq }, output: true, call: o.call, ret: o.ret });
        } else if (o.result.kind === 'ambiguous') {
          const seq = at.get(o.stream)?.get(o.payload);
          if (seq !== undefined) push({ client: o.client, key, op: { kind: 'cas', expected: seq - 1, value: seq }, output: undefined, call: o.call, ret: undefined });
        }
        break;
      }
      case 'read':
        if (o.holder !== null) push({ client: o.client, key: `lease:${o.name}`, op: { kind: 'read' }, output: o.holder.term * OWNERS + o.holder.owner, call: o.call, ret: o.ret });
        break;
      case 'head':
        push({ client: o.client, key: `stream:${o.stream}`, op: { kind: 'read' }, output: o.seq, call: o.call, ret: o.ret });
        break;
    }
  }
  return out;
}

/** Runs the checker over `ops`; the report names each non-linearizable key. */
export function checkLinearizable(ops: readonly HistoryOp[], streams: ReadonlyMap<string, readonly FinalEntry[]>): CheckResult & { readonly report: string } {
  const result = checkHistory(toOperations(ops, streams));
  return { ...result, report: result.counterexamples.flatMap((c) => describeCounterexample(c)).join('\n') };
}

/**
 * The streams against the history: seqs 1..N, no payload twice (nothing applied twice), every
 * acknowledged append at its seq, no stale-refused append present. Returns the problems found.
 */
export function checkStreams(ops: readonly HistoryOp[], streams: ReadonlyMap<string, readonly FinalEntry[]>): string[] {
  const problems: string[] = [];
  for (const [stream, entries] of streams) {
    const seen = new Map<string, number>();
    entries.forEach((e, i) => {
      if (e.seq !== i + 1) problems.push(`${stream}: entry ${i} has seq ${e.seq}`);
      if (seen.has(e.payload)) problems.push(`${stream}: payload ${e.payload} at seq ${seen.get(e.payload)} and ${e.seq} (applied twice)`);
      seen.set(e.payload, e.seq);
    });
  }
  for (const o of ops) {
    if (o.kind !== 'append') continue;
    const seq = streams.get(o.stream)?.find((e) => e.payload === o.payload)?.seq;
    if (o.result.kind === 'ok' && seq !== o.result.seq) problems.push(`${o.stream}: ${o.payload} acknowledged at seq ${o.result.seq}, found at ${String(seq)} (lost or moved)`);
    if (o.result.kind === 'stale' && seq !== undefined) problems.push(`${o.stream}: ${o.payload} refused as stale, yet at seq ${seq}`);
  }
  return problems;
}

/** Counts of a history, for the test's log and the docs. */
export function summarize(ops: readonly HistoryOp[]): Record<string, number> {
  const n: Record<string, number> = {};
  for (const o of ops) {
    const amb = (o.kind === 'append' && o.result.kind === 'ambiguous') || (o.kind === 'renew' && o.renewed === undefined) || (o.kind === 'release' && o.released === undefined);
    const k = `${o.kind}${amb ? '?' : ''}`;
    n[k] = (n[k] ?? 0) + 1;
  }
  return n;
}

interface LeaseValue {
  readonly owner: string;
  readonly term: number;
}

/**
 * One client of the workload: picks a lease, acquires it (retrying a lost answer until it has
 * one), then while it holds it appends, renews and reads a few times, and releases it; a client
 * that finds the lease held reads it (from any member) and tries another. Runs until `until` (performance.now()).
 * Every operation goes to `ops`. An append is never retried (an ambiguous one may be in the
 * stream once, or not at all).
 */
export async function leaseClient(cluster: ProcessCluster, client: number, names: readonly string[], ttlMs: number, until: number, ops: HistoryOp[], stop?: () => boolean): Promise<void> {
  return quietOnClose(cluster, leaseClientRun(cluster, client, names, ttlMs, until, ops, stop));
}

/** A workload client's failure is the test's, unless the cluster was closed under it (the test already failed). */
async function quietOnClose(cluster: ProcessCluster, run: Promise<void>): Promise<void> {
  try {
    await run;
  } catch (err) {
    if (!cluster.isClosed) throw err;
  }
}

async function leaseClientRun(cluster: ProcessCluster, client: number, names: readonly string[], ttlMs: number, until: number, ops: HistoryOp[], stop?: () => boolean): Promise<void> {
  const owner = ownerOf(client);
  let counter = 0;
  let pick = client;
  const done = (): boolean => performance.now() >= until || (stop?.() ?? false) || cluster.isClosed;
  while (!done()) {
    const name = names[pick++ % names.length]!;
    const got = await acquireResolved(cluster, client, name, ttlMs, ops);
    if (!got) {
      await read(cluster, client, name, ops);
      await new Promise((r) => setTimeout(r, 5 + (client % 3) * 5));
      continue;
    }
    const term = got;
    const rounds = 2 + ((client + counter) % 4);
    for (let i = 0; i < rounds && !done(); i++) {
      const payload = `${owner}:${++counter}`;
      const call = performance.now();
      const out = await cluster.request({ cmd: 'append', token: { lease: name, term }, stream: `s-${name}`, payload });
      const ret = performance.now();
      ops.push({ kind: 'append', client, stream: `s-${name}`, payload, call, ret: out.kind === 'ambiguous' ? undefined : ret, result: appendResult(out) });
      if (i % 2 === 1) {
        const rc = performance.now();
        const r = await cluster.request({ cmd: 'renew', name, owner, term, ttlMs });
        const rr = performance.now();
        ops.push({ kind: 'renew', client, name, term, call: rc, ret: r.kind === 'ambiguous' ? undefined : rr, renewed: r.kind === 'ok' ? (r.value as { renewed: boolean }).renewed : r.kind === 'refused' ? unexpected(r) : undefined });
      }
      if (i % 3 === 2) await head(cluster, client, `s-${name}`, ops);
    }
    await releaseResolved(cluster, client, name, term, ops);
  }
}

function unexpected(o: Outcome & { kind: 'refused' }): never {
  throw new Error(`unexpected refusal ${o.code} from node ${o.node}: ${o.message}`);
}

function appendResult(o: Outcome): HistoryOp & { kind: 'append' } extends { result: infer R } ? R : never {
  if (o.kind === 'ok') return { kind: 'ok', seq: o.value as number };
  if (o.kind === 'ambiguous') return { kind: 'ambiguous' };
  if (o.code === 'STALE_TERM') return { kind: 'stale' };
  return unexpected(o);
}

/** The term acquired, or 0 when another owner holds the lease. Throws when no answer came within the bound. */
async function acquireResolved(cluster: ProcessCluster, client: number, name: string, ttlMs: number, ops: HistoryOp[]): Promise<number> {
  const call = performance.now();
  for (let attempt = 0; attempt < 20; attempt++) {
    const out = await cluster.request({ cmd: 'acquire', name, owner: ownerOf(client), ttlMs });
    if (out.kind === 'ambiguous') continue;
    if (out.kind === 'refused') unexpected(out);
    const v = out.value as { acquired: boolean; lease: LeaseValue };
    const ret = performance.now();
    ops.push({ kind: 'acquire', client, name, call, ret, acquired: v.acquired, owner: ownerNumber(v.lease.owner), term: v.lease.term });
    return v.acquired ? v.lease.term : 0;
  }
  throw new Error(`client ${client}: acquire ${name} got no answer in 20 attempts`);
}

async function releaseResolved(cluster: ProcessCluster, client: number, name: string, term: number, ops: HistoryOp[]): Promise<void> {
  const call = performance.now();
  let lost = false;
  for (let attempt = 0; attempt < 20; attempt++) {
    const out = await cluster.request({ cmd: 'release', name, owner: ownerOf(client), term });
    if (out.kind === 'ambiguous') {
      lost = true;
      continue;
    }
    if (out.kind === 'refused') unexpected(out);
    // After a lost answer, false may mean the lost call released it: unknown which.
    const released = out.value as boolean;
    ops.push({ kind: 'release', client, name, term, call, ret: performance.now(), released: lost && !released ? undefined : released });
    return;
  }
  throw new Error(`client ${client}: release ${name} got no answer in 20 attempts`);
}

let reads = 0;

/** Reads go to any member in turn, followers included (their reads wait for a read index); only answered ones are kept. */
async function read(cluster: ProcessCluster, client: number, name: string, ops: HistoryOp[]): Promise<void> {
  const call = performance.now();
  const out = await cluster.call(cluster.anyNode(reads++), { cmd: 'read', name });
  if (!out.ok) return;
  const lease = out.value as LeaseValue | null;
  ops.push({ kind: 'read', client, name, call, ret: performance.now(), holder: lease === null ? null : { owner: ownerNumber(lease.owner), term: lease.term } });
}

async function head(cluster: ProcessCluster, client: number, stream: string, ops: HistoryOp[]): Promise<void> {
  const call = performance.now();
  const out = await cluster.call(cluster.anyNode(reads++), { cmd: 'streamHead', stream });
  if (!out.ok) return;
  ops.push({ kind: 'head', client, stream, call, ret: performance.now(), seq: (out.value as { seq: number }).seq });
}

/**
 * The appender under load: holds one lease (acquired once, renewed every `renewEveryMs`) and
 * appends to its stream one entry at a time, as fast as answers come, until `stop()`.
 */
export async function appender(cluster: ProcessCluster, client: number, name: string, ttlMs: number, ops: HistoryOp[], stop: () => boolean, renewEveryMs = 500): Promise<void> {
  return quietOnClose(cluster, appenderRun(cluster, client, name, ttlMs, ops, () => stop() || cluster.isClosed, renewEveryMs));
}

async function appenderRun(cluster: ProcessCluster, client: number, name: string, ttlMs: number, ops: HistoryOp[], stop: () => boolean, renewEveryMs: number): Promise<void> {
  const term = await acquireResolved(cluster, client, name, ttlMs, ops);
  if (term === 0) throw new Error(`appender ${client}: lease ${name} is held by another`);
  const owner = ownerOf(client);
  let lastRenew = performance.now();
  let n = 0;
  while (!stop()) {
    const payload = `${owner}:${++n}`;
    const call = performance.now();
    const out = await cluster.request({ cmd: 'append', token: { lease: name, term }, stream: `s-${name}`, payload });
    ops.push({ kind: 'append', client, stream: `s-${name}`, payload, call, ret: out.kind === 'ambiguous' ? undefined : performance.now(), result: appendResult(out) });
    if (performance.now() - lastRenew >= renewEveryMs) {
      lastRenew = performance.now();
      const r = await cluster.request({ cmd: 'renew', name, owner, term, ttlMs });
      ops.push({ kind: 'renew', client, name, term, call: lastRenew, ret: r.kind === 'ambiguous' ? undefined : performance.now(), renewed: r.kind === 'ok' ? (r.value as { renewed: boolean }).renewed : r.kind === 'refused' ? unexpected(r) : undefined });
    }
  }
  await releaseResolved(cluster, client, name, term, ops);
}

/** Every node's copy of each stream (all must be equal), as the final streams of the history. */
export async function finalStreams(cluster: ProcessCluster, streams: readonly string[], nodes: readonly number[] = cluster.ids): Promise<Map<string, FinalEntry[]>> {
  const out = new Map<string, FinalEntry[]>();
  for (const stream of streams) {
    let first: string | undefined;
    for (const id of nodes) {
      const entries = (await cluster.readAll(id, stream)).map((e) => ({ seq: e.seq, payload: e.payload }));
      const text = JSON.stringify(entries);
      if (first === undefined) {
        first = text;
        out.set(stream, entries);
      } else if (text !== first) {
        throw new Error(`node ${id}'s copy of ${stream} differs from node ${nodes[0]}'s (${entries.length} vs ${out.get(stream)!.length} entries)`);
      }
    }
  }
  return out;
}
