/**
 * The chaos checker: after a run, compare what the store kept (each group's stream) with what the
 * nodes say happened (their histories) and decide whether any safety rule broke.
 *
 * Histories may have lost their tail (kill -9 before a flush) and a node may have died in the
 * middle of a call, so the checker only ever reasons from records that exist: an "ok" that is
 * missing from the history is never a violation, and an entry in the stream that no history
 * mentions is fine (an ambiguous or unrecorded attempt that landed).
 *
 * Safety, per group:
 *  - stream-shape: sequence numbers are 1..N without gaps; every entry was written under the
 *    group's lease and its payload names the term it was written with.
 *  - term-order: accepted terms never decrease in stream order (fencing, rule 5).
 *  - two-owners: no term has entries from two owners, and no two owners were elected with the
 *    same term (terms come from the store, rule 4).
 *  - term-went-back: one owner's elections never go back in term.
 *  - reordered, duplicated: one owner's entries appear in the order it sent them, each at most
 *    once (late writes, which run beside newer work, excepted from the order).
 *  - lost-ack: every append acknowledged ok is in the stream at the acknowledged sequence number
 *    with the same payload and term.
 *  - false-reject: an append rejected as stale left nothing in the stream, and the stream does
 *    hold a higher term that explains the rejection.
 * Liveness:
 *  - no-leader: after the last fault healed, every group had an append acknowledged ok within
 *    TTL + 1 s (the sign that a leader was elected and its writes are accepted).
 *
 * Replication (`checkReplication`, for runs with followers):
 *  - projection-not-prefix: at every sample the runner took of a follower's projection (rows in
 *    apply order), row i holds the stream's entry i (seq, term, payload): nothing applied twice,
 *    nothing skipped, nothing the log does not hold, and no row ever taken back.
 *  - stale-read: a read the router served from a follower claimed at most its threshold, and
 *    returned every entry the runner had seen in the log more than the claimed lag (plus the
 *    follower's poll, which the claim cannot count) before the read was sent.
 */
import type { StreamEntry } from '../core/index.js';
import type { AppendRecord, ChaosPayload, HistoryRecord } from './history.js';

export type ViolationRule =
  | 'stream-shape'
  | 'term-order'
  | 'two-owners'
  | 'term-went-back'
  | 'reordered'
  | 'duplicated'
  | 'lost-ack'
  | 'false-reject'
  | 'no-leader'
  | 'node-crashed'
  | 'projection-not-prefix'
  | 'stale-read';

export interface Violation {
  readonly rule: ViolationRule;
  readonly group: string | null;
  readonly message: string;
  /** The offending part of the stream, if any. */
  readonly entries: readonly StreamEntry[];
  /** The offending part of the history, if any. */
  readonly records: readonly HistoryRecord[];
}

export interface CheckInput {
  readonly groups: readonly string[];
  /** Each group's whole stream, in sequence order. */
  readonly streams: ReadonlyMap<string, readonly StreamEntry[]>;
  /** Every history record of every node incarnation. */
  readonly histories: readonly HistoryRecord[];
  readonly ttlMs: number;
  /** When the last fault healed (Date.now()), or null when there was none; liveness is checked after it. */
  readonly lastHealAt: number | null;
  /** When the workload was told to stop; the liveness window must fit before it. */
  readonly endAt: number;
  /** Allowed time from the last heal to an accepted write, ms (default ttlMs + 1000). */
  readonly recoveryLimitMs?: number;
}

export interface GroupStats {
  readonly entries: number;
  readonly terms: number;
  /** ms from the last heal to the first accepted write sent after it; null when none. */
  readonly recoveryMs: number | null;
}

export interface CheckResult {
  readonly violations: Violation[];
  readonly accepted: number;
  readonly rejected: number;
  readonly ambiguous: number;
  /** Ambiguous appends whose entry is in the stream after all. */
  readonly ambiguousLanded: number;
  /** New terms elected after each group's first one, over all groups. */
  readonly leaderChanges: number;
  /** Late appends (sent with the old token after leadership ended): accepted, rejected. */
  readonly late: { readonly ok: number; readonly rejected: number };
  /** Times a node process found the store refusing to open and retried. */
  readonly openRetries: number;
  readonly groups: ReadonlyMap<string, GroupStats>;
}

/** At most this many violations of one rule per group are reported (the first ones). */
const MAX_PER_RULE = 5;

function parsePayload(text: string): ChaosPayload | null {
  try {
    const v = JSON.parse(text) as Partial<ChaosPayload>;
    if (typeof v.n === 'string' && typeof v.o === 'string' && typeof v.t === 'number' && typeof v.c === 'number') return v as ChaosPayload;
  } catch {
    // fall through
  }
  return null;
}

export function check(input: CheckInput): CheckResult {
  const violations: Violation[] = [];
  const counts = new Map<string, number>();
  const add = (v: Violation): void => {
    const key = `${v.rule}/${v.group ?? ''}`;
    const n = (counts.get(key) ?? 0) + 1;
    counts.set(key, n);
    if (n <= MAX_PER_RULE) violations.push(v);
  };
  const limitMs = input.recoveryLimitMs ?? input.ttlMs + 1000;

  const appends = input.histories.filter((r): r is AppendRecord => r.k === 'append');
  const byPayload = new Map<string, AppendRecord[]>();
  for (const r of appends) {
    const list = byPayload.get(r.payload);
    if (list) list.push(r);
    else byPayload.set(r.payload, [r]);
  }
  const recordsFor = (entries: readonly StreamEntry[]): HistoryRecord[] => entries.flatMap((e) => byPayload.get(e.payload) ?? []);

  let accepted = 0;
  let rejected = 0;
  let ambiguous = 0;
  let ambiguousLanded = 0;
  let leaderChanges = 0;
  const groupStats = new Map<string, GroupStats>();

  for (const group of input.groups) {
    const stream = input.streams.get(group) ?? [];
    const payloadsInStream = new Map<string, StreamEntry>();

    // stream-shape, term-order, two-owners (stream side), reordered
    const ownerOfTerm = new Map<number, { owner: string; entry: StreamEntry }>();
    const lastOfOwner = new Map<string, StreamEntry & { counter: number }>();
    for (let i = 0; i < stream.length; i++) {
      const e = stream[i]!;
      payloadsInStream.set(e.payload, e);
      const p = parsePayload(e.payload);
      if (e.seq !== i + 1 || e.lease !== group || !p || p.t !== e.term) {
        const why =
          e.seq !== i + 1
            ? `entry ${i + 1} has seq ${e.seq}`
            : e.lease !== group
              ? `seq ${e.seq} was written under lease ${e.lease}, not ${group}`
              : !p
                ? `seq ${e.seq} has a payload that is not a chaos payload`
                : `seq ${e.seq} is stored with term ${e.term} but was sent with term ${p.t}`;
        add({ rule: 'stream-shape', group, message: why, entries: stream.slice(Math.max(0, i - 1), i + 2), records: recordsFor([e]) });
      }
      const prev = stream[i - 1];
      if (prev && e.term < prev.term) {
        const slice = stream.slice(Math.max(0, i - 3), i + 2);
        add({
          rule: 'term-order',
          group,
          message: `term went down in the stream: seq ${prev.seq} has term ${prev.term}, seq ${e.seq} has term ${e.term}`,
          entries: slice,
          records: recordsFor(slice),
        });
      }
      if (!p) continue;
      const holder = ownerOfTerm.get(e.term);
      if (!holder) ownerOfTerm.set(e.term, { owner: p.o, entry: e });
      else if (holder.owner !== p.o) {
        add({
          rule: 'two-owners',
          group,
          message: `term ${e.term} has accepted entries from two owners: ${holder.owner} (seq ${holder.entry.seq}) and ${p.o} (seq ${e.seq})`,
          entries: [holder.entry, e],
          records: recordsFor([holder.entry, e]),
        });
      }
      if (p.l === 1) continue; // a late write runs beside the owner's newer work: no order to keep
      const last = lastOfOwner.get(p.o);
      if (last && p.c === last.counter) {
        add({
          rule: 'duplicated',
          group,
          message: `${p.o}'s attempt ${p.c} is in the stream twice (seq ${last.seq} and ${e.seq}): one append applied two times`,
          entries: [last, e],
          records: recordsFor([e]),
        });
      } else if (last && p.c < last.counter) {
        add({
          rule: 'reordered',
          group,
          message: `${p.o}'s attempt ${p.c} (seq ${e.seq}) comes after its later attempt ${last.counter} (seq ${last.seq})`,
          entries: [last, e],
          records: recordsFor([last, e]),
        });
      }
      lastOfOwner.set(p.o, { ...e, counter: p.c });
    }

    // two-owners (election side), term-went-back
    const elected = input.histories.filter((r): r is Extract<HistoryRecord, { k: 'elected' }> => r.k === 'elected' && r.group === group);
    const electedOwner = new Map<number, Extract<HistoryRecord, { k: 'elected' }>>();
    const lastElected = new Map<string, Extract<HistoryRecord, { k: 'elected' }>>();
    for (const r of elected) {
      const other = electedOwner.get(r.term);
      if (!other) electedOwner.set(r.term, r);
      else if (other.owner !== r.owner) {
        add({ rule: 'two-owners', group, message: `two owners were elected with term ${r.term}: ${other.owner} and ${r.owner}`, entries: [], records: [other, r] });
      }
      const before = lastElected.get(r.owner);
      if (before && r.term < before.term) {
        add({ rule: 'term-went-back', group, message: `${r.owner} was elected with term ${before.term}, then with lower term ${r.term}`, entries: [], records: [before, r] });
      }
      lastElected.set(r.owner, r);
    }
    for (const [term, { owner, entry }] of ownerOfTerm) {
      const r = electedOwner.get(term);
      if (r && r.owner !== owner) {
        add({
          rule: 'two-owners',
          group,
          message: `term ${term} was elected by ${r.owner} but its entries come from ${owner}`,
          entries: [entry],
          records: [r, ...recordsFor([entry])],
        });
      }
    }
    const terms = new Set(elected.map((r) => r.term));
    leaderChanges += Math.max(0, terms.size - 1);

    // lost-ack, false-reject
    const maxTerm = stream.reduce((m, e) => Math.max(m, e.term), 0);
    let recovery: AppendRecord | null = null;
    for (const r of appends) {
      if (r.group !== group) continue;
      if (r.outcome === 'ok') {
        accepted++;
        const e = r.seq === undefined ? undefined : stream[r.seq - 1];
        if (!e || e.seq !== r.seq || e.payload !== r.payload || e.term !== r.term) {
          const found = payloadsInStream.get(r.payload);
          add({
            rule: 'lost-ack',
            group,
            message: e
              ? `ok for seq ${r.seq} (${r.payload}) but the stream holds ${e.payload} (term ${e.term}) there${found ? `; the payload is at seq ${found.seq}` : ''}`
              : `ok for seq ${r.seq} (${r.payload}) but the stream has only ${stream.length} entries${found ? `; the payload is at seq ${found.seq}` : ''}`,
            entries: e ? [e] : [],
            records: [r],
          });
        }
        if (input.lastHealAt !== null && r.sentAt >= input.lastHealAt && (recovery === null || r.at < recovery.at)) recovery = r;
      } else if (r.outcome === 'rejected') {
        rejected++;
        const landed = payloadsInStream.get(r.payload);
        if (landed) {
          add({ rule: 'false-reject', group, message: `append rejected as stale, yet it is in the stream at seq ${landed.seq}`, entries: [landed], records: [r] });
        } else if (maxTerm <= r.term) {
          add({
            rule: 'false-reject',
            group,
            message: `append with term ${r.term} rejected as stale, but no higher term ever wrote to the stream (highest ${maxTerm})`,
            entries: [],
            records: [r],
          });
        }
      } else {
        ambiguous++;
        if (payloadsInStream.has(r.payload)) ambiguousLanded++;
      }
    }

    // no-leader: liveness after the last fault healed
    let recoveryMs: number | null = null;
    if (input.lastHealAt !== null) {
      recoveryMs = recovery ? recovery.at - input.lastHealAt : null;
      const windowEnd = input.lastHealAt + limitMs;
      if (recoveryMs === null || recoveryMs > limitMs) {
        const context = appends
          .filter((r) => r.group === group && r.at >= input.lastHealAt! - input.ttlMs && r.at <= windowEnd + 1000)
          .slice(-10);
        const events = input.histories.filter(
          (r) => (r.k === 'elected' || r.k === 'deposed') && r.group === group && r.at >= input.lastHealAt! - 2 * input.ttlMs,
        );
        add({
          rule: 'no-leader',
          group,
          message:
            recoveryMs === null
              ? input.endAt < windowEnd
                ? `no write was accepted after the last fault healed, and the run ended only ${input.endAt - input.lastHealAt} ms after it (needs ${limitMs})`
                : `no write was accepted after the last fault healed (limit ${limitMs} ms)`
              : `the first write accepted after the last fault healed came ${recoveryMs} ms after it (limit ${limitMs} ms)`,
          entries: [],
          records: [...events, ...context].sort((a, b) => a.at - b.at),
        });
      }
    }
    groupStats.set(group, { entries: stream.length, terms: new Set(stream.map((e) => e.term)).size, recoveryMs });
  }

  const late = {
    ok: appends.filter((r) => r.late && r.outcome === 'ok').length,
    rejected: appends.filter((r) => r.late && r.outcome === 'rejected').length,
  };
  let openRetries = 0;
  for (const r of input.histories) if (r.k === 'start') openRetries += r.openRetries ?? 0;
  return { violations, accepted, rejected, ambiguous, ambiguousLanded, leaderChanges, late, openRetries, groups: groupStats };
}

/** A violation as text: the rule and message, then the offending stream entries and history records. */
export function formatViolation(v: Violation, startedAt = 0): string {
  const lines = [`[${v.rule}]${v.group ? ` group ${v.group}:` : ''} ${v.message}`];
  for (const e of v.entries) lines.push(`    stream ${e.stream} seq ${e.seq} term ${e.term} payload ${e.payload}`);
  for (const r of v.records) lines.push(`    history ${formatRecord(r, startedAt)}`);
  return lines.join('\n');
}

export function formatRecord(r: HistoryRecord, startedAt = 0): string {
  const t = `+${((r.at - startedAt) / 1000).toFixed(3)}s`;
  switch (r.k) {
    case 'append': {
      const result = r.outcome === 'ok' ? `ok seq ${r.seq}` : `${r.outcome} (${r.error ?? ''})`;
      return `${t} ${r.proc} ${r.group} append term ${r.term} #${r.counter} sent +${((r.sentAt - startedAt) / 1000).toFixed(3)}s -> ${result}`;
    }
    case 'elected':
      return `${t} ${r.proc} ${r.group} elected term ${r.term} as ${r.owner}`;
    case 'deposed':
      return `${t} ${r.proc} ${r.group} deposed term ${r.term} (${r.reason})`;
    case 'start':
      return `${t} ${r.proc} started pid ${r.pid}`;
    case 'stop':
      return `${t} ${r.proc} stopped`;
  }
}

// ---- replication: followers' projections and the router's reads ---------------------------

/** One row of a follower's projection, in apply order. */
export interface ProjectionRow {
  readonly seq: number;
  readonly term: number;
  readonly payload: string;
}

/**
 * One look at a follower's projection: its row count then (`total`) and the rows added since the
 * previous sample of the same follower (`rows`, in apply order). The checker rebuilds the whole
 * projection at each instant from these.
 */
export interface ProjectionSample {
  readonly follower: string;
  readonly group: string;
  /** Date.now() when the sample was read. */
  readonly at: number;
  readonly total: number;
  readonly rows: readonly ProjectionRow[];
}

/** The log's head as the runner read it: `head` was committed by `at` (Date.now() on receipt). */
export interface HeadObservation {
  readonly group: string;
  readonly at: number;
  readonly head: number;
}

/** A read the ReadRouter served during the run. */
export interface RouterRead {
  readonly group: string;
  /** Date.now() before the route was asked for. */
  readonly sentAt: number;
  /** The read's threshold, ms. */
  readonly maxLagMs: number;
  readonly role: 'follower' | 'leader';
  readonly nodeId: string;
  /** The staleness bound the router reported for it, ms. */
  readonly lagMs: number;
  /** The last seq in what the read returned (0: nothing). */
  readonly seq: number;
}

export interface ReplicationCheckInput {
  /** Each group's whole stream, in sequence order. */
  readonly streams: ReadonlyMap<string, readonly StreamEntry[]>;
  readonly samples: readonly ProjectionSample[];
  readonly heads: readonly HeadObservation[];
  readonly reads: readonly RouterRead[];
  /**
   * What a claimed lag cannot count, ms: a caught-up follower's 0 is as of its last poll, up to
   * its pollMs earlier, and the timers of a loaded machine run late (docs/replication.md).
   */
  readonly slackMs: number;
}

export interface ReplicationStats {
  readonly samples: number;
  /** Rows of every follower's projection at its last sample. */
  readonly applied: number;
  readonly reads: number;
  readonly followerReads: number;
  /** Follower reads that returned less than the head the runner had seen before sending them. */
  readonly behindReads: number;
}

export function checkReplication(input: ReplicationCheckInput): { violations: Violation[]; stats: ReplicationStats } {
  const violations: Violation[] = [];
  const counts = new Map<string, number>();
  const add = (v: Violation): void => {
    const key = `${v.rule}/${v.group ?? ''}`;
    const n = (counts.get(key) ?? 0) + 1;
    counts.set(key, n);
    if (n <= MAX_PER_RULE) violations.push(v);
  };

  // projection-not-prefix: rebuild each projection sample by sample.
  const projections = new Map<string, number>();
  const broken = new Set<string>();
  for (const s of [...input.samples].sort((a, b) => a.at - b.at)) {
    if (broken.has(s.follower)) continue;
    const stream = input.streams.get(s.group) ?? [];
    const before = projections.get(s.follower) ?? 0;
    const fail = (message: string, entry?: StreamEntry): void => {
      broken.add(s.follower); // one report per follower: everything after a break repeats it
      add({ rule: 'projection-not-prefix', group: s.group, message: `follower ${s.follower} at ${s.at}: ${message}`, entries: entry ? [entry] : [], records: [] });
    };
    if (s.total !== before + s.rows.length) {
      fail(`the projection has ${s.total} rows, but ${before} were seen before and ${s.rows.length} were added since: a row was taken back or inserted out of order`);
      continue;
    }
    for (let i = 0; i < s.rows.length; i++) {
      const row = s.rows[i]!;
      const pos = before + i + 1;
      const e = stream[pos - 1];
      if (!e) {
        fail(`row ${pos} holds seq ${row.seq}, but the log has only ${stream.length} entries`);
        break;
      }
      if (row.seq !== e.seq || row.term !== e.term || row.payload !== e.payload) {
        const why = row.seq !== e.seq ? `seq ${row.seq}` : row.term !== e.term ? `seq ${row.seq} with term ${row.term}` : `seq ${row.seq} with payload ${row.payload}`;
        fail(`row ${pos} holds ${why}, where the log holds seq ${e.seq} term ${e.term} payload ${e.payload}: not a prefix of the log`, e);
        break;
      }
    }
    projections.set(s.follower, s.total);
  }

  // stale-read: when was each seq first seen committed?
  const heads = new Map<string, HeadObservation[]>();
  for (const h of input.heads) {
    const list = heads.get(h.group);
    if (list) list.push(h);
    else heads.set(h.group, [h]);
  }
  const firstSeen = new Map<string, number[]>(); // group -> min at for head >= seq, index seq
  for (const [group, list] of heads) {
    const max = list.reduce((m, h) => Math.max(m, h.head), 0);
    const seen = new Array<number>(max + 2).fill(Infinity);
    for (const h of list) if (h.at < seen[h.head]!) seen[h.head] = h.at;
    for (let seq = max - 1; seq >= 0; seq--) seen[seq] = Math.min(seen[seq]!, seen[seq + 1]!);
    firstSeen.set(group, seen);
  }
  let followerReads = 0;
  let behindReads = 0;
  for (const r of input.reads) {
    if (r.role === 'follower') {
      followerReads++;
      if (r.lagMs > r.maxLagMs) {
        add({ rule: 'stale-read', group: r.group, message: `a read with threshold ${r.maxLagMs} ms was served by follower ${r.nodeId}, which the router reported ${r.lagMs} ms stale`, entries: [], records: [] });
      }
    }
    const seen = firstSeen.get(r.group)?.[r.seq + 1] ?? Infinity;
    if (seen < r.sentAt && r.role === 'follower') behindReads++;
    const staleMs = r.sentAt - seen;
    if (staleMs > r.lagMs + input.slackMs) {
      const missing = input.streams.get(r.group)?.[r.seq];
      add({
        rule: 'stale-read',
        group: r.group,
        message:
          `a read sent at ${r.sentAt} was served by ${r.role} ${r.nodeId} up to seq ${r.seq}, reported at most ${r.lagMs} ms stale (threshold ${r.maxLagMs} ms), ` +
          `but seq ${r.seq + 1} had been seen committed ${staleMs} ms before it was sent (slack ${input.slackMs} ms)`,
        entries: missing ? [missing] : [],
        records: [],
      });
    }
  }
  const applied = [...projections.values()].reduce((a, b) => a + b, 0);
  return { violations, stats: { samples: input.samples.length, applied, reads: input.reads.length, followerReads, behindReads } };
}
