/**
 * The leader directs work: the wire between a WorkCoordinator (the leader) and its Workers, over
 * nothing but the Store interface, so it runs on every store.
 *
 * Three kinds of record, all in fenced streams:
 *  - the group's assignment stream `<group>/assignments`, appended by the leader with its token
 *    (lease `<group>`): each entry gives one worker incarnation the attempts of one round (one or
 *    more items), or revokes one attempt. The leader's term is the entry's own `term`, stamped by the store, not a field a
 *    row could forge.
 *  - one result stream per worker, `<group>/results/<nodeId>`, appended by the worker with the
 *    token of its lease `<group>/workers/<nodeId>`: each entry answers one attempt, naming the job,
 *    item, attempt and the leader term it answers.
 *  - the worker leases themselves: a live lease `<group>/workers/<nodeId>` is a live worker; its
 *    term names the incarnation an assignment was given to.
 *
 * The rules that make it fenced:
 *  - a worker acts only on an assignment whose term is the group lease's current term, made for
 *    its own current lease term;
 *  - the leader accepts a result only for the current attempt of an item of its own job and term,
 *    written under the worker lease term the attempt was given to.
 * So a deposed leader's assignments are refused by the store once the new leader has written, and
 * ignored by workers before that; a dead or stalled worker's late result answers an attempt that
 * was superseded and is dropped.
 */
import { InvalidArgumentError, StoreDataError, checkName, checkOwner, limits, timerDelay } from '../core/index.js';
import type { Clock, JsonValue, Store, StreamEntry } from '../core/index.js';

/** Defaults of the coordinator and the worker, in one place. */
export const WORK_DEFAULTS = { pollMs: 100, maxRetries: 20, itemTimeoutMs: 30_000, maxAttempts: 5, workerConcurrency: 1 } as const;
/** Bounds: items per job, attempts per item, items a worker takes at once. */
export const WORK_LIMITS = { items: 100_000, maxAttempts: 100, concurrency: 1000 } as const;

/** Version of the records below; a reader refuses any other. */
export const WORK_PROTOCOL = 1;

/** One attempt of one item, given to one worker incarnation. */
export interface AssignRecord {
  readonly kind: 'assign';
  readonly job: string;
  readonly item: string;
  readonly attempt: number;
  /** The worker's node id (its lease is `<group>/workers/<worker>`). */
  readonly worker: string;
  /** The term of that worker lease when the leader chose it: a later incarnation does not act on it. */
  readonly workerTerm: number;
  readonly input: JsonValue;
}

/** The leader gave up on an attempt (it timed out): the worker may stop working on it. */
export interface RevokeRecord {
  readonly kind: 'revoke';
  readonly job: string;
  readonly item: string;
  readonly attempt: number;
  readonly worker: string;
}

export type AssignmentRecord = AssignRecord | RevokeRecord;

/** A worker's answer to one attempt: its output, or the message its handler threw. */
export type ResultRecord = {
  readonly job: string;
  readonly item: string;
  readonly attempt: number;
  /** The leader term of the assignment it answers. */
  readonly term: number;
} & ({ readonly ok: true; readonly output: JsonValue } | { readonly ok: false; readonly error: string });

/** The stream and lease names of a group's work. */
export interface WorkNames {
  readonly group: string;
  readonly assignments: string;
  readonly workersPrefix: string;
  workerLease(nodeId: string): string;
  results(nodeId: string): string;
}

export function workNames(group: string): WorkNames {
  checkName('group', group);
  const names: WorkNames = {
    group,
    assignments: `${group}/assignments`,
    workersPrefix: `${group}/workers/`,
    workerLease: (nodeId) => `${group}/workers/${nodeId}`,
    results: (nodeId) => `${group}/results/${nodeId}`,
  };
  checkName('group', names.assignments);
  return names;
}

/** The worker's lease and stream names, checked: a long group and node id must still fit 200 characters. */
export function checkWorkerNames(names: WorkNames, nodeId: string): void {
  checkOwner('nodeId', nodeId);
  checkName('nodeId', names.workerLease(nodeId));
  checkName('nodeId', names.results(nodeId));
}

/** A JSON value's text, checked to fit one stream entry with room for the record around it. */
export function encodeJson(field: string, value: unknown, maxBytes: number): string {
  let text: string | undefined;
  try {
    text = JSON.stringify(value);
  } catch (err) {
    throw new InvalidArgumentError(field, `not serializable as JSON (${(err as Error).message})`);
  }
  if (text === undefined) throw new InvalidArgumentError(field, `expected a JSON value, got ${typeof value}`);
  if (Buffer.byteLength(text) > maxBytes) throw new InvalidArgumentError(field, `must be at most ${maxBytes} bytes as JSON`);
  return text;
}

/** Room an item's input or a result's output may take in one entry (the rest holds ids and numbers). */
export const VALUE_MAX_BYTES = limits.payloadMaxBytes - 4096;

/** One item of an assignment entry, its input already JSON text (checked when the job was given). */
export interface AssignedItem {
  readonly item: string;
  readonly attempt: number;
  readonly inputJson: string;
}

/**
 * Assignment entries for one worker: the items given to it in one round, as few entries as fit
 * (each at most the payload limit), so a round costs one append per worker, not one per item.
 * Inputs are spliced in as the JSON text they already are, not parsed and encoded again.
 */
export function encodeAssignments(head: { job: string; worker: string; workerTerm: number }, items: readonly AssignedItem[]): { text: string; items: AssignedItem[] }[] {
  const prefix = `${JSON.stringify({ v: WORK_PROTOCOL, kind: 'assign', ...head }).slice(0, -1)},"items":[`;
  const limit = limits.payloadMaxBytes;
  const out: { text: string; items: AssignedItem[] }[] = [];
  let parts: string[] = [];
  let batch: AssignedItem[] = [];
  let bytes = Buffer.byteLength(prefix) + 2;
  for (const it of items) {
    const part = `${JSON.stringify({ item: it.item, attempt: it.attempt }).slice(0, -1)},"input":${it.inputJson}}`;
    const size = Buffer.byteLength(part) + 1;
    if (batch.length > 0 && bytes + size > limit) {
      out.push({ text: `${prefix}${parts.join(',')}]}`, items: batch });
      parts = [];
      batch = [];
      bytes = Buffer.byteLength(prefix) + 2;
    }
    parts.push(part);
    batch.push(it);
    bytes += size;
  }
  if (batch.length > 0) out.push({ text: `${prefix}${parts.join(',')}]}`, items: batch });
  return out;
}

export function encodeRevoke(r: Omit<RevokeRecord, 'kind'>): string {
  return JSON.stringify({ v: WORK_PROTOCOL, kind: 'revoke', ...r });
}

export function encodeResult(r: ResultRecord): string {
  return JSON.stringify({ v: WORK_PROTOCOL, ...r });
}

type Fields = Record<string, unknown>;

function garbage(entry: StreamEntry, why: string): StoreDataError {
  return new StoreDataError(
    `work stream ${JSON.stringify(entry.stream)}: entry ${entry.seq} is not a tenure work record (${why}); ` +
      'was it written by another program? Nothing after it is read',
  );
}

function parseObject(entry: StreamEntry): Fields {
  let value: unknown;
  try {
    value = JSON.parse(entry.payload);
  } catch {
    throw garbage(entry, `not JSON: ${JSON.stringify(entry.payload.slice(0, 40))}`);
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) throw garbage(entry, 'not a JSON object');
  const fields = value as Fields;
  if (fields.v !== WORK_PROTOCOL) throw garbage(entry, `protocol version ${JSON.stringify(fields.v)}, expected ${WORK_PROTOCOL}`);
  return fields;
}

function text(entry: StreamEntry, fields: Fields, key: string): string {
  const v = fields[key];
  if (typeof v !== 'string' || v.length === 0 || v.length > limits.nameMaxLength) throw garbage(entry, `field ${key} is not an id of 1..${limits.nameMaxLength} characters`);
  return v;
}

function count(entry: StreamEntry, fields: Fields, key: string): number {
  const v = fields[key];
  if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < 1) throw garbage(entry, `field ${key} is not a positive integer`);
  return v;
}

/** Decode an assignment stream entry into its records; StoreDataError naming the stream and seq for anything else. */
export function decodeAssignments(entry: StreamEntry, group: string): AssignmentRecord[] {
  if (entry.lease !== group) throw garbage(entry, `written under lease ${JSON.stringify(entry.lease)}, not the group's`);
  const f = parseObject(entry);
  const job = text(entry, f, 'job');
  const worker = text(entry, f, 'worker');
  if (f.kind === 'revoke') return [{ kind: 'revoke', job, worker, item: text(entry, f, 'item'), attempt: count(entry, f, 'attempt') }];
  if (f.kind !== 'assign') throw garbage(entry, `kind ${JSON.stringify(f.kind)} is neither assign nor revoke`);
  const workerTerm = count(entry, f, 'workerTerm');
  if (!Array.isArray(f.items) || f.items.length === 0) throw garbage(entry, 'an assignment without items');
  return f.items.map((it: unknown) => {
    if (typeof it !== 'object' || it === null || Array.isArray(it) || !('input' in it)) throw garbage(entry, 'an assigned item is not { item, attempt, input }');
    const fields = it as Fields;
    return { kind: 'assign', job, worker, workerTerm, item: text(entry, fields, 'item'), attempt: count(entry, fields, 'attempt'), input: fields.input as JsonValue };
  });
}

/** Decode a result stream entry; StoreDataError naming the stream and seq for anything else. */
export function decodeResult(entry: StreamEntry, workerLease: string): ResultRecord {
  if (entry.lease !== workerLease) throw garbage(entry, `written under lease ${JSON.stringify(entry.lease)}, not the worker's`);
  const f = parseObject(entry);
  const base = { job: text(entry, f, 'job'), item: text(entry, f, 'item'), attempt: count(entry, f, 'attempt'), term: count(entry, f, 'term') };
  if (f.ok === true) {
    if (!('output' in f)) throw garbage(entry, 'a result without output');
    return { ...base, ok: true, output: f.output as JsonValue };
  }
  if (f.ok === false && typeof f.error === 'string') return { ...base, ok: false, error: f.error };
  throw garbage(entry, 'neither { ok: true, output } nor { ok: false, error }');
}

/**
 * The last seq of `stream` (0 when empty), in about 2·log2(n) one-entry reads: a reader that
 * needs only what is appended from now on skips the past without reading it. Entries appended
 * while it searches may or may not be counted; callers find the head before anything they wait
 * for can be appended.
 */
export async function streamHead(store: Store, stream: string): Promise<number> {
  const exists = async (seq: number): Promise<boolean> => (await store.readStream(stream, { after: seq - 1, limit: 1 })).length > 0;
  if (!(await exists(1))) return 0;
  let lo = 1; // exists
  let hi = 2;
  while (await exists(hi)) {
    lo = hi;
    if (hi > Number.MAX_SAFE_INTEGER / 2) throw new StoreDataError(`stream ${JSON.stringify(stream)} holds an entry past 2^52`);
    hi *= 2;
  }
  // Invariant: lo exists, hi does not.
  while (hi - lo > 1) {
    const mid = lo + Math.floor((hi - lo) / 2);
    if (await exists(mid)) lo = mid;
    else hi = mid;
  }
  return lo;
}

/**
 * The one place the work protocol waits for news. Coordinator and worker read, then wait here
 * for `pollMs` (or until `wake()`, or the signal) and read again. Should the Store interface gain
 * a push for streams, it wakes this instead of the timer.
 */
export class PollTicker {
  private wakeUp: (() => void) | null = null;
  private woken = false;

  constructor(
    private readonly clock: Clock,
    private readonly pollMs: number,
    private readonly signal: AbortSignal,
  ) {
    signal.addEventListener('abort', () => this.wake(), { once: true });
  }

  /** Read now instead of waiting out the interval. */
  wake(): void {
    this.woken = true;
    this.wakeUp?.();
  }

  /** Resolves after `ms` (default pollMs), at once when woken since the last wait, or on abort. */
  next(ms = this.pollMs): Promise<void> {
    if (this.woken || this.signal.aborted) {
      this.woken = false;
      return Promise.resolve();
    }
    return new Promise((resolve) => {
      let cancel = (): void => {};
      const done = (): void => {
        cancel();
        this.wakeUp = null;
        this.woken = false;
        resolve();
      };
      cancel = this.clock.setTimer(timerDelay(ms), done);
      this.wakeUp = done;
    });
  }
}

/**
 * Wake `ticker` whenever the store pushes a new head of `stream` (Store.watchStream, where the
 * store has it: not MySQL). The poll stays the fallback for a missed notification. Returns the
 * unsubscribe function (a no-op where there is no push, or the store refused the watch).
 */
export function wakeOnAppend(store: Store, stream: string, ticker: PollTicker): () => void {
  if (typeof store.watchStream !== 'function') return () => {};
  try {
    return store.watchStream(stream, () => ticker.wake());
  } catch {
    return () => {}; // closing: the poll ends with the loop
  }
}

/** A signal that aborts when any of `signals` does (AbortSignal.any needs Node >= 20.3). */
export function anySignal(signals: readonly (AbortSignal | null | undefined)[]): { signal: AbortSignal; dispose: () => void } {
  const controller = new AbortController();
  const live = signals.filter((s): s is AbortSignal => s != null);
  const onAbort = (e: Event): void => controller.abort((e.target as AbortSignal).reason);
  for (const s of live) {
    if (s.aborted) {
      controller.abort(s.reason);
      break;
    }
    s.addEventListener('abort', onAbort, { once: true });
  }
  return { signal: controller.signal, dispose: () => live.forEach((s) => s.removeEventListener('abort', onAbort)) };
}
