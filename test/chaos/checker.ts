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
 */
import type { StreamEntry } from '../../src/core/index.js';
import type { AppendRecord, ChaosPayload, HistoryRecord } from '../fixtures/chaos-history.js';

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
  | 'node-crashed';

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
