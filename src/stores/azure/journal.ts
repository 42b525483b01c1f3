/**
 * Fenced streams on Azure Blob storage: every entry written under lease L goes to L's journal,
 * one append blob (`journals/<sha256 L>`), one line of JSON per entry. An append is one Append
 * Block with the append-position condition: it lands only if the journal is still exactly as
 * long as when the writer read it. The fence (the highest term accepted for L) is the last term
 * in the journal, so "no term above mine was accepted since my read" and the write are one
 * conditional request (safety rule 5). A stream is claimed by the lease of its first entry with
 * a create-if-absent blob (`streams/<sha256 S>`), and read from that lease's journal.
 *
 * Limits: Azure keeps at most 50,000 blocks in an append blob, so a lease's streams together
 * hold at most 50,000 entries; readers keep the journals they read parsed in memory.
 */
import { randomBytes } from 'node:crypto';
import {
  InvalidArgumentError,
  StaleTermError,
  StoreDataError,
  StoreUnavailableError,
  VersionConflictError,
  decideFence,
  decodeStreamEntry,
  foreignStreamError,
  reportStale,
} from '../../core/index.js';
import type { FencingToken, StreamEntry } from '../../core/index.js';
import { Blobs, bodyText, isAnswer } from './blobs.js';
import type { AppendBlobClient } from './driver.js';
import { blobNames, fromB64, toB64 } from './names.js';

interface JournalState {
  /** Bytes of the journal read so far (the append position of the next entry). */
  offset: number;
  /** The highest term accepted (the last entry's). */
  fence: number;
  readonly streams: Map<string, StreamEntry[]>;
  /** The ids of the latest appends, to recognise an append of ours whose answer was lost. */
  readonly ids: Map<string, number>;
}

const MAX_ATTEMPTS = 50;
const REMEMBERED_IDS = 1000;

export class Journals {
  private readonly states = new Map<string, JournalState>();
  private readonly owners = new Map<string, string>();
  /** Work on one lease's journal in this process goes one at a time (other processes race by condition). */
  private readonly queues = new Map<string, Promise<unknown>>();

  constructor(
    private readonly blobs: Blobs,
    private readonly issuedTerm: (lease: string) => Promise<number>,
  ) {}

  /** Append under `token`; see Store.appendFenced. */
  append(token: FencingToken, stream: string, payload: string, expectSeq: number | undefined): Promise<number> {
    return this.serial(token.lease, () => this.appendOnce(token, stream, payload, expectSeq));
  }

  /** Every entry of `stream` (from its lease's journal), in seq order. */
  async entries(stream: string): Promise<StreamEntry[]> {
    const lease = await this.ownerOf(stream);
    if (lease === null) return [];
    return this.serial(lease, async () => (await this.sync(lease)).streams.get(stream) ?? []);
  }

  /** The head of `stream` and the service's time right after the read that found it. */
  async head(stream: string): Promise<{ seq: number; nowMs: number }> {
    const lease = await this.ownerOf(stream);
    // (That lookup read the service when the stream has no owner yet, so its time is fresh.)
    if (lease === null) return { seq: 0, nowMs: this.blobs.serverNowMs() };
    const seq = await this.serial(lease, async () => (await this.sync(lease)).streams.get(stream)?.length ?? 0);
    return { seq, nowMs: this.blobs.serverNowMs() };
  }

  /** Whether `lease` has a journal (it accepted a fenced write once). */
  async exists(lease: string): Promise<boolean> {
    try {
      await this.blobs.call(`read the journal of ${lease}`, (abortSignal) => this.journal(lease).getProperties({ abortSignal }));
      return true;
    } catch (err) {
      if (isAnswer(err, 404)) return false;
      throw this.blobs.unexpected(err);
    }
  }

  private serial<T>(lease: string, fn: () => Promise<T>): Promise<T> {
    const before = this.queues.get(lease) ?? Promise.resolve();
    const mine = before.catch(() => {}).then(fn);
    this.queues.set(lease, mine);
    void mine.catch(() => {}).finally(() => {
      if (this.queues.get(lease) === mine) this.queues.delete(lease);
    });
    return mine;
  }

  private journal(lease: string) {
    return this.blobs.container.getAppendBlobClient(blobNames.journal(lease));
  }

  /** The journal blob of `lease` (for `purge`). */
  blob(lease: string): AppendBlobClient {
    return this.journal(lease);
  }

  /**
   * Forget what this process read of the journals of leases, and the claims of streams, whose
   * names start with `prefix`, or whose owner's does (`purge` deleted their blobs).
   */
  forget(prefix: string): void {
    for (const lease of [...this.states.keys()]) if (lease.startsWith(prefix)) this.states.delete(lease);
    for (const [stream, lease] of [...this.owners]) if (stream.startsWith(prefix) || lease.startsWith(prefix)) this.owners.delete(stream);
  }

  private async appendOnce(token: FencingToken, stream: string, payload: string, expectSeq: number | undefined): Promise<number> {
    const { lease, term } = token;
    // Tells this append's own line from any other: a resent append must not be written twice.
    const appendId = randomBytes(8).toString('hex');
    let issued = await this.issuedTerm(lease);
    for (let attempt = 0; attempt < MAX_ATTEMPTS; attempt++) {
      const st = await this.sync(lease);
      const done = st.ids.get(appendId);
      if (done !== undefined) return done;
      let verdict = decideFence(term, st.fence, issued);
      if (verdict === 'unissued') {
        issued = await this.issuedTerm(lease); // issued since the first read?
        verdict = decideFence(term, st.fence, issued);
      }
      if (verdict === 'stale') throw reportStale(new StaleTermError(lease, term, st.fence), { stream });
      if (verdict === 'unissued') throw new InvalidArgumentError('token.term', `term ${term} was never issued for lease ${lease} (latest ${issued})`);
      let owner = await this.ownerOf(stream);
      if (owner !== null && owner !== lease) throw foreignStreamError(stream, owner, lease);
      const head = st.streams.get(stream)?.length ?? 0;
      if (expectSeq !== undefined && expectSeq !== head) throw new VersionConflictError(stream, expectSeq, head);
      if (owner === null) {
        owner = await this.claim(stream, lease);
        if (owner !== lease) throw foreignStreamError(stream, owner, lease);
      }
      const seq = head + 1;
      // a: the append time on the service's clock as this client knows it (its latest `Date`,
      // whole seconds, moved on by local monotonic time: up to 1 s early), the clock streamHead
      // reads; never this host's wall clock (safety rule 1).
      const line = `${JSON.stringify({ s: stream, q: seq, t: term, p: payload, a: this.blobs.serverNowMs(), i: appendId })}\n`;
      const bytes = Buffer.byteLength(line);
      try {
        await this.blobs.call(`append to ${stream}`, (abortSignal) =>
          this.journal(lease).appendBlock(line, bytes, { abortSignal, conditions: { appendPosition: st.offset } }),
        );
      } catch (err) {
        if (isAnswer(err, 412)) continue; // the journal grew since the read: read on and decide again
        if (isAnswer(err, 404)) {
          await this.createJournal(lease);
          continue;
        }
        if (isAnswer(err, 409, 'BlockCountExceedsLimit')) {
          throw new StoreDataError(`azblob store: the journal of lease ${JSON.stringify(lease)} holds 50,000 entries, the most an Azure append blob can; no more fenced writes under it`);
        }
        throw this.blobs.unexpected(err);
      }
      this.apply(lease, st, line, st.offset);
      st.offset += bytes;
      return seq;
    }
    throw new StoreUnavailableError(`${this.blobs.label}: append to ${stream} gave up after ${MAX_ATTEMPTS} conflicting attempts`);
  }

  /** Read the journal of `lease` from where this process left off. */
  private async sync(lease: string): Promise<JournalState> {
    let st = this.states.get(lease);
    if (!st) {
      st = { offset: 0, fence: 0, streams: new Map(), ids: new Map() };
      this.states.set(lease, st);
    }
    const state = st;
    let text: string;
    try {
      const res = await this.blobs.call(`read the journal of ${lease}`, (abortSignal) => this.journal(lease).download(state.offset, undefined, { abortSignal }));
      text = await bodyText(res);
    } catch (err) {
      if (isAnswer(err, 404) || isAnswer(err, 416)) return state; // no journal yet, or nothing past the offset
      throw this.blobs.unexpected(err);
    }
    let at = 0;
    while (at < text.length) {
      const end = text.indexOf('\n', at);
      if (end < 0) throw this.garbage(lease, state.offset, 'a line without its newline');
      const line = text.slice(at, end + 1);
      this.apply(lease, state, line, state.offset);
      state.offset += Buffer.byteLength(line);
      at = end + 1;
    }
    return state;
  }

  private apply(lease: string, st: JournalState, line: string, offset: number): void {
    let e: { s?: unknown; q?: unknown; t?: unknown; p?: unknown; a?: unknown; i?: unknown };
    try {
      e = JSON.parse(line) as typeof e;
    } catch {
      throw this.garbage(lease, offset, 'a line that is not JSON');
    }
    if (typeof e !== 'object' || e === null || typeof e.s !== 'string' || typeof e.p !== 'string') throw this.garbage(lease, offset, 'a line that is not a tenure entry');
    const list = st.streams.get(e.s) ?? [];
    const entry = decodeStreamEntry('azblob', e.s, { seq: e.q, lease, term: e.t, payload: e.p, appendedAt: e.a });
    if (entry.seq !== list.length + 1) throw this.garbage(lease, offset, `entry ${entry.seq} of stream ${JSON.stringify(e.s)} after ${list.length}`);
    if (entry.term < st.fence) throw this.garbage(lease, offset, `term ${entry.term} after term ${st.fence}`);
    list.push(entry);
    st.streams.set(e.s, list);
    st.fence = entry.term;
    if (typeof e.i === 'string') {
      st.ids.set(e.i, entry.seq);
      if (st.ids.size > REMEMBERED_IDS) st.ids.delete(st.ids.keys().next().value!);
    }
  }

  private garbage(lease: string, offset: number, what: string): StoreDataError {
    return new StoreDataError(`azblob store: the journal of lease ${JSON.stringify(lease)} (${blobNames.journal(lease)}) holds ${what} at byte ${offset} (written by another program?)`);
  }

  private async createJournal(lease: string): Promise<void> {
    try {
      await this.blobs.call(`create the journal of ${lease}`, (abortSignal) => this.journal(lease).create({ abortSignal, conditions: { ifNoneMatch: '*' } }));
    } catch (err) {
      if (isAnswer(err, 409) || isAnswer(err, 412)) return;
      throw this.blobs.unexpected(err);
    }
  }

  /** The lease that owns `stream`, or null when nothing claimed it yet. A claim never changes, so it is kept. */
  private async ownerOf(stream: string): Promise<string | null> {
    const known = this.owners.get(stream);
    if (known !== undefined) return known;
    let res;
    try {
      res = await this.blobs.call(`read the owner of stream ${stream}`, (abortSignal) => this.streamBlob(stream).getProperties({ abortSignal }));
    } catch (err) {
      if (isAnswer(err, 404)) return null;
      throw this.blobs.unexpected(err);
    }
    const owner = fromB64(res.metadata?.['lease']);
    if (owner === null || owner === '') throw new StoreDataError(`azblob store: the claim blob of stream ${JSON.stringify(stream)} (${blobNames.stream(stream)}) names no lease (written by hand?)`);
    this.owners.set(stream, owner);
    return owner;
  }

  /** Claim `stream` for `lease` if nobody has; returns the owner either way. */
  private async claim(stream: string, lease: string): Promise<string> {
    try {
      await this.blobs.call(`claim stream ${stream}`, (abortSignal) =>
        this.streamBlob(stream).upload('', 0, { abortSignal, metadata: { tenure: '1', lease: toB64(lease), name: toB64(stream) }, conditions: { ifNoneMatch: '*' } }),
      );
      this.owners.set(stream, lease);
      return lease;
    } catch (err) {
      if (!isAnswer(err, 409) && !isAnswer(err, 412)) throw this.blobs.unexpected(err);
    }
    const owner = await this.ownerOf(stream);
    if (owner === null) throw new StoreUnavailableError(`${this.blobs.label}: the claim of stream ${stream} vanished`);
    return owner;
  }

  private streamBlob(stream: string) {
    return this.blobs.container.getBlockBlobClient(blobNames.stream(stream));
  }
}


