/**
 * The replicated state machine of the Raft store: leases, fences, fenced streams, client sessions
 * and the log's time, changed only by `apply(index, entry)` of committed log entries.
 *
 * It is pure and deterministic: no clock, no randomness, no I/O, no iteration over anything whose
 * order is not itself part of the state. Every node that applies the same entries holds the same
 * state, answers with the same results and writes byte-equal snapshots. Time is the log's own
 * (docs/raft-store.md, "Time"): each command carries the proposing leader's lease clock, and
 * expiry is judged against the highest time the log has carried, never against a local clock.
 */
import {
  InvalidArgumentError,
  StaleTermError,
  StoreDataError,
  TenureError,
  VersionConflictError,
  checkName,
  checkReadOptions,
  decideAcquire,
  decideFence,
  decideRelease,
  foreignStreamError,
  isLive,
  renewLease,
  toLease,
} from '../../core/index.js';
import type { Lease, LeaseMeta, LeaseRow, ReadStreamOptions, RenewResult, StreamEntry } from '../../core/index.js';
import { crc32c } from '../../raft/wal/crc32c.js';
import { decodeCommand, errorToResult } from './commands.js';
import type { Command, CommandResult, Operation, ResultError, ResultValue } from './commands.js';

/**
 * Bounds of the dedupe table (docs/raft-store.md, "Sessions"). They decide which answers are
 * forgotten, so every node of a cluster must start with the same ones (the node layer fixes them);
 * a snapshot carries them, and a restored machine takes them from it.
 */
export interface StateMachineOptions {
  /** Most client sessions kept; the least recently used is forgotten beyond it (default 10 000). */
  readonly maxSessions?: number;
  /** Most answers kept per session; the oldest is forgotten beyond it (default 1024). */
  readonly maxResultsPerSession?: number;
}

/** What an applied entry changed, for the node to push to watchers. */
export type ChangeEvent =
  | {
      readonly kind: 'lease';
      /** `acquired`: a new holder and term; `renewed`: the holder's lease extended (also a live re-acquire); `released`: given up; `refreshed`: extended by a new leader's takeover. */
      readonly change: 'acquired' | 'renewed' | 'released' | 'refreshed';
      readonly name: string;
      /** The live lease after the change, null when released. */
      readonly lease: Lease | null;
    }
  | { readonly kind: 'stream'; readonly stream: string; readonly seq: number; readonly lease: string; readonly term: number };

export interface ApplyOutcome {
  /** The answer to the proposer (null for an empty entry: the leader's no-op). */
  readonly result: CommandResult | null;
  /** Changes made, in order; empty when the command was refused, a retry, or changed nothing. */
  readonly events: readonly ChangeEvent[];
  /** True when the answer came from the dedupe table (the command was applied before). */
  readonly duplicate: boolean;
}

interface SessionState {
  /** Answers below this seq are forgotten: a retry of one is answered STORE_UNAVAILABLE (unknown). */
  floor: number;
  /** Each kept answer with the log time it was given at. */
  readonly results: Map<number, KeptResult>;
}

interface KeptResult {
  readonly atMs: number;
  readonly result: CommandResult;
}

export const SNAPSHOT_MAGIC = 0x4d53_4e54; // "TNSM" little-endian
/**
 * The format written. 2: the body is lines of JSON, one per lease, fence, stream, entry and
 * session, so no single string holds the whole state (V8 caps a string at 512 MiB: a state of
 * 1 GiB could not be snapshotted in format 1, one JSON text). Format 1 is still read.
 */
export const SNAPSHOT_VERSION = 2;
const SNAPSHOT_HEADER_BYTES = 4 + 1 + 4 + 4;
/** The first line of a format 2 body. */
const STATE_TAG = 'tenure-state';
/** Lines are joined into chunks of about this many UTF-16 units before encoding. */
const CHUNK_CHARS = 1 << 20;

/** Counts of what the state machine holds, for metrics and for the memory note in docs/raft-store.md. */
export interface StateMachineStats {
  readonly leases: number;
  readonly streams: number;
  readonly entries: number;
  /** Sum of the UTF-16 length of every payload (≈ bytes of memory / 2 for ASCII). */
  readonly payloadChars: number;
  readonly sessions: number;
}

export class RaftStateMachine {
  private maxSessions: number;
  private maxResultsPerSession: number;
  private leases = new Map<string, LeaseRow>();
  /** The highest term accepted by a fenced append, per lease name. */
  private fences = new Map<string, number>();
  private streams = new Map<string, StreamEntry[]>();
  /** Sessions in least-recently-used order (a use moves one to the end); the order is state. */
  private sessions = new Map<string, SessionState>();
  private applied = 0;
  private time = 0;
  private payloadChars = 0;
  private entryCount = 0;

  constructor(options: StateMachineOptions = {}) {
    this.maxSessions = options.maxSessions ?? 10_000;
    this.maxResultsPerSession = options.maxResultsPerSession ?? 1024;
    if (!Number.isSafeInteger(this.maxSessions) || this.maxSessions < 1) throw new InvalidArgumentError('maxSessions', `expected an integer >= 1, got ${String(this.maxSessions)}`);
    if (!Number.isSafeInteger(this.maxResultsPerSession) || this.maxResultsPerSession < 1) {
      throw new InvalidArgumentError('maxResultsPerSession', `expected an integer >= 1, got ${String(this.maxResultsPerSession)}`);
    }
  }

  /** Index of the last entry applied (0 before any). */
  get appliedIndex(): number {
    return this.applied;
  }

  /** The log's time, ms: the highest lease clock any applied command carried. */
  get logTimeMs(): number {
    return this.time;
  }

  stats(): StateMachineStats {
    return { leases: this.leases.size, streams: this.streams.size, entries: this.entryCount, payloadChars: this.payloadChars, sessions: this.sessions.size };
  }

  /**
   * Applies the committed entry at `index` (indexes must increase; a gap is allowed, since
   * configuration entries are not given to the state machine). An empty entry (a new leader's
   * no-op) changes nothing. Bytes that are not a valid command are answered with an
   * INVALID_ARGUMENT result and change nothing but the applied index, identically on every node.
   * Throws only for an index that does not increase (a node-layer bug).
   */
  apply(index: number, data: Uint8Array): ApplyOutcome {
    if (!Number.isSafeInteger(index) || index <= this.applied) {
      throw new TenureError('INVARIANT_VIOLATED', `raft store state machine: entry ${index} applied after entry ${this.applied}`);
    }
    this.applied = index;
    if (data.length === 0) return { result: null, events: [], duplicate: false };
    let command: Command;
    try {
      command = decodeCommand(data);
    } catch (err) {
      return { result: errorToResult(err), events: [], duplicate: false };
    }
    // Time never goes back: a new leader's clock may start behind the last stamp it applied.
    if (command.timeMs > this.time) this.time = command.timeMs;
    const session = command.session;
    if (session === undefined) return this.run(command.operation);

    let state = this.sessions.get(session.client);
    if (state !== undefined) {
      this.sessions.delete(session.client); // re-inserted below: most recently used last
    } else {
      state = { floor: 1, results: new Map() };
    }
    this.sessions.set(session.client, state);
    this.evictSessions();
    // The client has its answers below `ack`: forget them.
    if (session.ack > state.floor) {
      for (const seq of state.results.keys()) if (seq < session.ack) state.results.delete(seq);
      state.floor = session.ack;
    }
    const kept = state.results.get(session.seq);
    if (kept !== undefined) return { result: aged(kept.result, this.time - kept.atMs), events: [], duplicate: true };
    if (session.seq < state.floor) {
      const error: ResultError = {
        code: 'STORE_UNAVAILABLE',
        message: `command ${session.seq} of client ${session.client} is older than the answers kept (from ${state.floor}); whether it was applied is unknown`,
      };
      return { result: { ok: false, error }, events: [], duplicate: true };
    }
    const outcome = this.run(command.operation);
    if (outcome.result !== null) {
      state.results.set(session.seq, { atMs: this.time, result: outcome.result });
      if (state.results.size > this.maxResultsPerSession) {
        // Forget the lowest seq kept; Map order is insertion order, not seq order, so find it.
        let lowest = Infinity;
        for (const seq of state.results.keys()) if (seq < lowest) lowest = seq;
        state.results.delete(lowest);
        if (lowest + 1 > state.floor) state.floor = lowest + 1;
      }
    }
    return outcome;
  }

  /** The live lease `name` at the log's time, or at `atMs` when later (a leader's read between entries). */
  read(name: string, atMs?: number): Lease | null {
    checkName('name', name);
    const now = this.now(atMs);
    const row = this.leases.get(name);
    return isLive(row, now) ? toLease(row, now) : null;
  }

  /** Every live lease whose name starts with `prefix`, sorted by name, at the log's time (or `atMs` when later). */
  list(prefix = '', atMs?: number): Lease[] {
    if (typeof prefix !== 'string') throw new InvalidArgumentError('prefix', `expected a string, got ${typeof prefix}`);
    const now = this.now(atMs);
    const out: Lease[] = [];
    for (const row of this.leases.values()) if (row.name.startsWith(prefix) && isLive(row, now)) out.push(toLease(row, now));
    return out.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  }

  /** Entries of `stream` after `options.after`, at most `options.limit` (default 1000, max 10 000). */
  readStream(stream: string, options?: ReadStreamOptions): StreamEntry[] {
    checkName('stream', stream);
    const { after, limit } = checkReadOptions(options);
    return (this.streams.get(stream) ?? []).slice(after, after + limit);
  }

  /** The last entry of `stream`, or null for a stream never written. */
  readLast(stream: string): StreamEntry | null {
    checkName('stream', stream);
    return this.streams.get(stream)?.at(-1) ?? null;
  }

  /** The last seq of `stream` (0 when empty): where a follower of the stream stands. */
  streamHead(stream: string): number {
    return this.streams.get(stream)?.length ?? 0;
  }

  private now(atMs: number | undefined): number {
    return atMs !== undefined && Number.isFinite(atMs) && atMs > this.time ? atMs : this.time;
  }

  private run(operation: Operation): ApplyOutcome {
    const events: ChangeEvent[] = [];
    let value: ResultValue;
    try {
      value = this.execute(operation, events);
    } catch (err) {
      // Every check runs before the first change, so a refused command changed nothing.
      return { result: errorToResult(err), events: [], duplicate: false };
    }
    return { result: { ok: true, value }, events, duplicate: false };
  }

  private execute(op: Operation, events: ChangeEvent[]): ResultValue {
    const now = this.time;
    switch (op.op) {
      case 'acquire': {
        const decision = decideAcquire(this.leases.get(op.name), op.name, op.owner, op.ttlMs, op.meta, now);
        if (!decision.acquired) return { acquired: false, lease: toLease(decision.row, now) };
        this.leases.set(op.name, decision.row);
        const lease = toLease(decision.row as LeaseRow & { owner: string }, now);
        events.push({ kind: 'lease', change: decision.newTerm ? 'acquired' : 'renewed', name: op.name, lease });
        return { acquired: true, lease };
      }
      case 'renew':
        return this.renewOne(op.name, op.owner, op.term, op.ttlMs, events);
      case 'renewMany':
        return op.leases.map(({ name, term }) => this.renewOne(name, op.owner, term, op.ttlMs, events));
      case 'release': {
        const next = decideRelease(this.leases.get(op.name), op.owner, op.term, now);
        if (next === null) return false;
        this.leases.set(op.name, next);
        events.push({ kind: 'lease', change: 'released', name: op.name, lease: null });
        return true;
      }
      case 'append': {
        const { token, stream, payload } = op;
        const highest = this.fences.get(token.lease) ?? 0;
        const leaseTerm = this.leases.get(token.lease)?.term ?? 0;
        const verdict = decideFence(token.term, highest, leaseTerm);
        if (verdict === 'stale') throw new StaleTermError(token.lease, token.term, highest);
        if (verdict === 'unissued') throw new InvalidArgumentError('token.term', `term ${token.term} was never issued for lease ${token.lease} (latest ${leaseTerm})`);
        let entries = this.streams.get(stream);
        const owner = entries?.[0]?.lease;
        if (owner !== undefined && owner !== token.lease) throw foreignStreamError(stream, owner, token.lease);
        // The compare-and-set on the head (a state cell's version), refused before the fence moves.
        const head = entries?.length ?? 0;
        if (op.expectSeq !== undefined && op.expectSeq !== head) throw new VersionConflictError(stream, op.expectSeq, head);
        this.fences.set(token.lease, token.term);
        if (!entries) this.streams.set(stream, (entries = []));
        const seq = entries.length + 1;
        // appendedAt is the log's lease clock (the Raft store's own clock, the same on every node).
        entries.push({ stream, seq, lease: token.lease, term: token.term, payload, appendedAt: this.time });
        this.entryCount++;
        this.payloadChars += payload.length;
        events.push({ kind: 'stream', stream, seq, lease: token.lease, term: token.term });
        return seq;
      }
      case 'tick':
        return null;
      case 'purge': {
        // A tool's clean-up (Store.purge): a purged name starts again at term 1. Never on names in use.
        let purged = 0;
        for (const [name, row] of [...this.leases]) {
          if (!name.startsWith(op.prefix)) continue;
          this.leases.delete(name);
          purged++;
          if (isLive(row, now)) events.push({ kind: 'lease', change: 'released', name, lease: null });
        }
        for (const name of [...this.fences.keys()]) {
          if (!name.startsWith(op.prefix)) continue;
          this.fences.delete(name);
          purged++;
        }
        for (const [stream, entries] of [...this.streams]) {
          if (!stream.startsWith(op.prefix)) continue;
          this.streams.delete(stream);
          this.entryCount -= entries.length;
          for (const e of entries) this.payloadChars -= e.payload.length;
          purged += entries.length;
        }
        return purged;
      }
      case 'takeover': {
        // etcd's lessor refreshes every lease when a leader is promoted; here a live lease is given
        // at least its full TTL from the takeover, so no holder's lease ends sooner than it would
        // have under the old leader, whatever the new leader's clock (docs/raft-store.md).
        for (const [name, row] of this.leases) {
          if (!isLive(row, now)) continue;
          const expiresAtMs = Math.max(row.expiresAtMs, now + row.ttlMs);
          if (expiresAtMs === row.expiresAtMs) continue;
          const next: LeaseRow = { ...row, expiresAtMs };
          this.leases.set(name, next);
          events.push({ kind: 'lease', change: 'refreshed', name, lease: toLease(next as LeaseRow & { owner: string }, now) });
        }
        return null;
      }
    }
  }

  private renewOne(name: string, owner: string, term: number, ttlMs: number, events: ChangeEvent[]): RenewResult {
    const result = renewLease(this.leases.get(name), owner, term, ttlMs, this.time, (row) => this.leases.set(name, row));
    if (result.renewed) events.push({ kind: 'lease', change: 'renewed', name, lease: result.lease });
    return result;
  }

  private evictSessions(): void {
    while (this.sessions.size > this.maxSessions) {
      const oldest = this.sessions.keys().next().value as string;
      this.sessions.delete(oldest);
    }
  }

  /**
   * The whole state as bytes: a 13-byte header (magic "TNSM", version, CRC32C of the body, body
   * length) and a body of UTF-8 lines, each one JSON array ending in a newline (JSON escapes every
   * newline inside a string, so a newline byte only ends a line):
   *
   *     ["tenure-state", applied, time, maxSessions, maxResultsPerSession, leases, fences, streams, sessions]
   *     [name, owner, term, expiresAtMs, ttlMs, meta]          one per lease
   *     [name, term]                                          one per fence
   *     [name, entries]  then  [lease, term, payload, appendedAt] per entry, for each stream
   *     [client, floor, [[seq, atMs, result], ...]]            one per session
   *
   * Deterministic: two machines that applied the same entries give byte-equal snapshots.
   */
  snapshot(): Uint8Array {
    const chunks: Buffer[] = [];
    let lines: string[] = [];
    let chars = 0;
    const line = (item: unknown): void => {
      const text = JSON.stringify(item);
      lines.push(text);
      chars += text.length + 1;
      if (chars >= CHUNK_CHARS) flush();
    };
    const flush = (): void => {
      if (lines.length === 0) return;
      chunks.push(Buffer.from(`${lines.join('\n')}\n`, 'utf8'));
      lines = [];
      chars = 0;
    };
    line([STATE_TAG, this.applied, this.time, this.maxSessions, this.maxResultsPerSession, this.leases.size, this.fences.size, this.streams.size, this.sessions.size]);
    for (const r of this.leases.values()) line([r.name, r.owner, r.term, r.expiresAtMs, r.ttlMs, r.meta]);
    for (const f of this.fences) line(f);
    for (const [name, entries] of this.streams) {
      line([name, entries.length]);
      for (const e of entries) line([e.lease, e.term, e.payload, e.appendedAt]);
    }
    for (const [client, st] of this.sessions) line([client, st.floor, [...st.results].map(([seq, k]) => [seq, k.atMs, k.result])]);
    flush();
    let length = 0;
    for (const c of chunks) length += c.length;
    if (length > 0xffff_ffff) throw new StoreDataError(`raft store snapshot: the state is ${length} bytes, over the format's 4 GiB`);
    const out = new Uint8Array(SNAPSHOT_HEADER_BYTES + length);
    let at = SNAPSHOT_HEADER_BYTES;
    for (const c of chunks) {
      out.set(c, at);
      at += c.length;
    }
    const view = new DataView(out.buffer);
    view.setUint32(0, SNAPSHOT_MAGIC, true);
    out[4] = SNAPSHOT_VERSION;
    view.setUint32(5, crc32c(out.subarray(SNAPSHOT_HEADER_BYTES)), true);
    view.setUint32(9, length, true);
    return out;
  }

  /**
   * A state machine holding the state `bytes` were taken from. A snapshot that is damaged (bad
   * header, length or checksum) or whose content is not a valid state is a StoreDataError naming
   * what is wrong; nothing is half-restored (a new machine is built, the caller keeps its old one).
   */
  static restore(bytes: Uint8Array): RaftStateMachine {
    const bad = (what: string): StoreDataError => new StoreDataError(`raft store snapshot: ${what}`);
    if (bytes.length < SNAPSHOT_HEADER_BYTES) throw bad(`${bytes.length} bytes, shorter than the ${SNAPSHOT_HEADER_BYTES}-byte header`);
    const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    if (view.getUint32(0, true) !== SNAPSHOT_MAGIC) throw bad('not a Raft store snapshot (bad magic)');
    const version = bytes[4]!;
    if (version !== 1 && version !== 2) throw bad(`version ${version} is not understood (this node reads 1 and 2)`);
    const length = view.getUint32(9, true);
    if (length !== bytes.length - SNAPSHOT_HEADER_BYTES) throw bad(`header says ${length} bytes of body, ${bytes.length - SNAPSHOT_HEADER_BYTES} follow`);
    const body = bytes.subarray(SNAPSHOT_HEADER_BYTES);
    const crc = crc32c(body);
    if (crc !== view.getUint32(5, true)) throw bad(`checksum mismatch (stored ${view.getUint32(5, true)}, computed ${crc})`);
    const sm = new RaftStateMachine();
    try {
      if (version === 1) sm.loadJson(parseJson(body, 'body'));
      else sm.loadLines(body);
    } catch (err) {
      if (err instanceof StoreDataError) throw err;
      throw bad(`invalid content (${(err as Error).message.slice(0, 200)})`);
    }
    return sm;
  }

  /** Fills a fresh machine from a format 1 body (one JSON object); throws on anything malformed. */
  private loadJson(parsed: unknown): void {
    if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) fail('body is not an object');
    const b = parsed as Record<string, unknown>;
    this.applied = count(b.applied, 'applied');
    this.time = count(b.time, 'time');
    const [maxSessions, maxResults] = list(b.bounds, 'bounds');
    this.setBounds(maxSessions, maxResults);
    for (const item of list(b.leases, 'leases')) this.loadLease(item);
    for (const item of list(b.fences, 'fences')) this.loadFence(item);
    for (const item of list(b.streams, 'streams')) {
      const [name, entries] = list(item, 'a stream');
      const stream = this.openStream(name);
      list(entries, `the entries of ${stream}`).forEach((e, i) => this.loadEntry(stream, i + 1, e));
    }
    for (const item of list(b.sessions, 'sessions')) this.loadSession(item);
  }

  /** Fills a fresh machine from a format 2 body (lines, see snapshot()); throws on anything malformed. */
  private loadLines(body: Uint8Array): void {
    let at = 0;
    let n = 0;
    const next = (what: string): unknown => {
      if (at >= body.length) fail(`the body ends before ${what}`);
      const end = body.indexOf(0x0a, at);
      if (end < 0) fail(`line ${n + 1} has no newline`);
      const value = parseJson(body.subarray(at, end), `line ${n + 1}`);
      at = end + 1;
      n++;
      return value;
    };
    const [tag, applied, time, maxSessions, maxResults, leases, fences, streams, sessions] = list(next('the state line'), 'the state line');
    if (tag !== STATE_TAG) fail('the first line is not the state line');
    this.applied = count(applied, 'applied');
    this.time = count(time, 'time');
    this.setBounds(maxSessions, maxResults);
    for (let i = count(leases, 'the lease count'); i > 0; i--) this.loadLease(next('a lease'));
    for (let i = count(fences, 'the fence count'); i > 0; i--) this.loadFence(next('a fence'));
    for (let i = count(streams, 'the stream count'); i > 0; i--) {
      const [name, entries] = list(next('a stream'), 'a stream');
      const stream = this.openStream(name);
      const total = count(entries, `the entry count of ${stream}`);
      for (let seq = 1; seq <= total; seq++) this.loadEntry(stream, seq, next(`entry ${seq} of ${stream}`));
    }
    for (let i = count(sessions, 'the session count'); i > 0; i--) this.loadSession(next('a session'));
    if (at !== body.length) fail(`${body.length - at} bytes follow the last session`);
  }

  private setBounds(maxSessions: unknown, maxResults: unknown): void {
    this.maxSessions = count(maxSessions, 'maxSessions') || fail('maxSessions is 0');
    this.maxResultsPerSession = count(maxResults, 'maxResultsPerSession') || fail('maxResultsPerSession is 0');
  }

  private loadLease(item: unknown): void {
    const [name, owner, term, expiresAtMs, ttlMs, meta] = list(item, 'a lease');
    const row: LeaseRow = {
      name: text(name, 'a lease name'),
      owner: owner === null ? null : text(owner, `the owner of ${String(name)}`),
      term: count(term, `the term of ${String(name)}`),
      expiresAtMs: count(expiresAtMs, `the expiry of ${String(name)}`),
      ttlMs: count(ttlMs, `the TTL of ${String(name)}`),
      meta: typeof meta === 'object' && meta !== null && !Array.isArray(meta) ? (meta as LeaseMeta) : fail(`the meta of ${String(name)} is not an object`),
    };
    if (this.leases.has(row.name)) fail(`lease ${row.name} appears twice`);
    this.leases.set(row.name, row);
  }

  private loadFence(item: unknown): void {
    const [name, term] = list(item, 'a fence');
    const key = text(name, 'a fence name');
    if (this.fences.has(key)) fail(`fence ${key} appears twice`);
    this.fences.set(key, count(term, `the fence of ${key}`));
  }

  /** A new, empty stream `name` (its entries follow). */
  private openStream(name: unknown): string {
    const stream = text(name, 'a stream name');
    if (this.streams.has(stream)) fail(`stream ${stream} appears twice`);
    this.streams.set(stream, []);
    return stream;
  }

  private loadEntry(stream: string, seq: number, item: unknown): void {
    const [lease, term, payload, at] = list(item, `entry ${seq} of ${stream}`);
    const p = text(payload, `the payload of entry ${seq} of ${stream}`);
    this.streams.get(stream)!.push({
      stream,
      seq,
      lease: text(lease, `the lease of entry ${seq} of ${stream}`),
      term: count(term, `the term of entry ${seq} of ${stream}`),
      payload: p,
      appendedAt: count(at, `the append time of entry ${seq} of ${stream}`),
    });
    this.payloadChars += p.length;
    this.entryCount++;
  }

  private loadSession(item: unknown): void {
    const [client, floor, results] = list(item, 'a session');
    const key = text(client, 'a session client');
    if (this.sessions.has(key)) fail(`session ${key} appears twice`);
    const map = new Map<number, KeptResult>();
    for (const r of list(results, `the results of ${key}`)) {
      const [seq, atMs, result] = list(r, `a result of ${key}`);
      if (typeof result !== 'object' || result === null || typeof (result as { ok?: unknown }).ok !== 'boolean') fail(`a result of ${key} is not a result`);
      map.set(count(seq, `a seq of ${key}`), { atMs: count(atMs, `the time of a result of ${key}`), result: result as CommandResult });
    }
    this.sessions.set(key, { floor: count(floor, `the floor of ${key}`), results: map });
  }
}

// ---- snapshot decoding helpers: each throws StoreDataError naming what is wrong ----

const fail = (what: string): never => {
  throw new StoreDataError(`raft store snapshot: ${what}`);
};
const count = (v: unknown, what: string): number => (typeof v === 'number' && Number.isSafeInteger(v) && v >= 0 ? v : fail(`${what} is not an integer >= 0`));
const text = (v: unknown, what: string): string => (typeof v === 'string' ? v : fail(`${what} is not a string`));
const list = (v: unknown, what: string): unknown[] => (Array.isArray(v) ? v : fail(`${what} is not an array`));
const utf8 = new TextDecoder('utf-8', { fatal: true });
function parseJson(bytes: Uint8Array, what: string): unknown {
  try {
    return JSON.parse(utf8.decode(bytes));
  } catch (err) {
    return fail(`${what} is not UTF-8 JSON (${(err as Error).message.slice(0, 80)})`);
  }
}

/**
 * A kept answer given again `elapsedMs` of log time later: every lease in it has that much less
 * time left (never below 0), so a retried acquire or renew never reports more time than the lease
 * has now. (The client still counts its deadline from the first send of the command: rule 2.)
 */
function aged(result: CommandResult, elapsedMs: number): CommandResult {
  if (!result.ok || elapsedMs <= 0) return result;
  const age = (lease: Lease | null): Lease | null => (lease === null ? null : { ...lease, remainingMs: Math.max(0, lease.remainingMs - elapsedMs) });
  const v = result.value;
  if (Array.isArray(v)) return { ok: true, value: (v as readonly RenewResult[]).map((r) => ({ renewed: r.renewed, lease: age(r.lease) })) };
  if (typeof v === 'object' && v !== null) {
    if ('acquired' in v) return { ok: true, value: { acquired: v.acquired, lease: age(v.lease)! } };
    if ('renewed' in v) return { ok: true, value: { renewed: v.renewed, lease: age(v.lease) } };
  }
  return result;
}
