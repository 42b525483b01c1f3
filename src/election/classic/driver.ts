/**
 * The thin driver of the classic elections: runs a Bully or Ring machine over the Raft transport
 * (TCP or TLS, every connection authenticated with the cluster secret), performing the machine's
 * output: timers on the injected Clock, messages through the transport, the term through the
 * caller's `persistTerm` before the messages that claim it, and events.
 *
 * On the wire an election message rides in a Raft `app` message between the same two nodes: its
 * term is the election term, its one entry's data the election message (messages.ts). A frame
 * that is not that, or does not decode, or that no member would send, is refused with one log
 * line and a `refused` event (an ElectionMessageError), and the node keeps running.
 *
 * The transport must be this election's alone (its own cluster id and port): the driver takes its
 * message handler. The driver does not close it.
 */
import { systemClock, type Clock } from '../../core/clock.js';
import { ClosedError, InvalidArgumentError } from '../../core/errors.js';
import { systemRandom, type Random } from '../../core/random.js';
import { makeToken } from '../../core/token.js';
import { TypedEmitter } from '../../core/typed-emitter.js';
import { checkName } from '../../core/validate.js';
import type { FencingToken } from '../../core/types.js';
import type { Message } from '../../raft/core/types.js';
import type { RaftTransport } from '../../raft/transport/transport.js';
import { BullyMachine } from './bully.js';
import type { ClassicMachine, ClassicOutput, ClassicTiming } from './machine.js';
import { an, ElectionMessageError, decodeClassic, encodeClassic, type ClassicMessage, type NodeId } from './messages.js';
import { RingMachine } from './ring.js';

export type ClassicAlgorithm = 'bully' | 'ring';

export interface ClassicElectorOptions {
  readonly algorithm: ClassicAlgorithm;
  /** This election's transport (its `id` is this node's id); the elector takes its message handler. */
  readonly transport: RaftTransport;
  /** Every member's id, this node's included. */
  readonly members: readonly NodeId[];
  /** The group name in the fencing token (default `classic`). */
  readonly group?: string;
  readonly timing?: Partial<ClassicTiming>;
  /** The term saved by `persistTerm` before this process started (default 0). */
  readonly initialTerm?: number;
  /**
   * Saves the term, synchronously, before the messages that claim it are sent. Without it a
   * restarted node could lead a term it led before the restart (docs/classic-elections.md).
   */
  readonly persistTerm?: (term: number) => void;
  readonly clock?: Clock;
  readonly random?: Random;
  readonly log?: (line: string) => void;
  /** Aborting it closes the elector. */
  readonly signal?: AbortSignal;
}

export interface ClassicElectorEvents {
  /** This node leads; `token.term` is its fencing token. */
  elected: { readonly term: number; readonly token: FencingToken };
  deposed: { readonly term: number; readonly reason: 'newer-term' | 'stopped' };
  /** The leader this node follows changed (null: none known, an election is under way). */
  leader: { readonly leader: NodeId | null; readonly term: number };
  /** A frame from a peer was refused. */
  refused: { readonly from: NodeId; readonly error: ElectionMessageError };
}

/** Wraps an election message as the Raft message the transport carries. */
export function wrapClassic(m: ClassicMessage): Message {
  return { type: 'app', from: m.from, to: m.to, term: m.term, logTerm: 0, index: 0, entries: [{ term: 0, index: 0, type: 'normal', data: encodeClassic(m) }], commit: 0, reject: false, rejectHint: 0 };
}

/** The election message in a Raft message from the transport, or an ElectionMessageError. */
export function unwrapClassic(raw: Message): ClassicMessage {
  if (raw.type !== 'app' || raw.entries.length !== 1 || raw.entries[0]!.type !== 'normal') {
    throw new ElectionMessageError(`expected an app message with one entry carrying an election message, got a ${raw.type} message with ${raw.entries.length} entries`);
  }
  const m = decodeClassic(raw.entries[0]!.data);
  if (m.from !== raw.from || m.to !== raw.to) throw new ElectionMessageError(`${an(m.kind)} from ${m.from} to ${m.to} inside a frame from ${raw.from} to ${raw.to}`);
  if (m.term !== raw.term) throw new ElectionMessageError(`${an(m.kind)} of term ${m.term} inside a frame of term ${raw.term}`);
  return m;
}

/**
 * A Bully or Ring elector. `start()` begins; `leader`, `term`, `isLeader` and `token()` say where
 * it stands; `close()` ends it (a leader is deposed with reason `stopped`).
 */
export class ClassicElector extends TypedEmitter<ClassicElectorEvents> implements AsyncDisposable {
  readonly id: NodeId;
  readonly algorithm: ClassicAlgorithm;
  private readonly machine: ClassicMachine;
  private readonly transport: RaftTransport;
  private readonly clock: Clock;
  private readonly log: (line: string) => void;
  private readonly persist: ((term: number) => void) | undefined;
  private readonly group: string;
  private readonly timers = new Map<string, () => void>();
  private ledTerm: number | null = null;
  private started = false;
  private closed = false;
  private refusedCount = 0;
  private readonly onAbort: (() => void) | undefined;
  private readonly signal: AbortSignal | undefined;

  constructor(options: ClassicElectorOptions) {
    super();
    if (options.algorithm !== 'bully' && options.algorithm !== 'ring') throw new InvalidArgumentError('algorithm', `expected bully or ring, got ${String(options.algorithm)}`);
    this.algorithm = options.algorithm;
    this.transport = options.transport;
    this.id = options.transport.id;
    this.clock = options.clock ?? systemClock;
    this.log = options.log ?? ((line) => process.stderr.write(`${line}\n`));
    this.persist = options.persistTerm;
    this.group = checkName('group', options.group ?? 'classic');
    const config = { id: this.id, members: options.members, random: options.random ?? systemRandom, ...(options.timing ? { timing: options.timing } : {}), ...(options.initialTerm !== undefined ? { initialTerm: options.initialTerm } : {}) };
    this.machine = options.algorithm === 'bully' ? new BullyMachine(config) : new RingMachine(config);
    this.transport.onMessage((raw) => this.receive(raw));
    this.signal = options.signal;
    if (options.signal) {
      this.onAbort = () => void this.close();
      if (options.signal.aborted) this.closed = true;
      else options.signal.addEventListener('abort', this.onAbort, { once: true });
    }
  }

  /** Begins campaigning (a node that starts runs an election). */
  start(): this {
    if (this.closed) throw new ClosedError('the classic elector is closed');
    if (this.started) return this;
    this.started = true;
    this.perform(this.machine.step({ kind: 'start' }));
    return this;
  }

  get term(): number {
    return this.machine.term;
  }
  get leader(): NodeId | null {
    return this.machine.leader;
  }
  get isLeader(): boolean {
    return !this.closed && this.machine.isLeader;
  }
  /** Frames refused since the start. */
  get refused(): number {
    return this.refusedCount;
  }

  /** This leader's fencing token, or null when it does not lead. */
  token(): FencingToken | null {
    return this.isLeader && this.ledTerm !== null ? makeToken(this.group, this.ledTerm) : null;
  }

  private receive(raw: Message): void {
    if (this.closed || !this.started) return;
    let out: ClassicOutput;
    try {
      out = this.machine.step({ kind: 'message', message: unwrapClassic(raw) });
    } catch (err) {
      if (!(err instanceof ElectionMessageError)) throw err;
      this.refusedCount++;
      this.log(`classic election ${this.id}: refused a frame from peer ${raw.from}: ${err.message}`);
      this.emit('refused', { from: raw.from, error: err });
      return;
    }
    this.perform(out);
  }

  private perform(out: ClassicOutput): void {
    if (this.closed) return;
    if (out.persistTerm !== undefined) this.persist?.(out.persistTerm);
    for (const t of out.timers) {
      this.timers.get(t.name)?.();
      this.timers.delete(t.name);
      if (t.ms === null) continue;
      const cancel = this.clock.setTimer(t.ms, () => {
        if (this.timers.get(t.name) !== cancel) return;
        this.timers.delete(t.name);
        if (!this.closed) this.perform(this.machine.step({ kind: 'timer', name: t.name }));
      });
      this.timers.set(t.name, cancel);
    }
    if (out.messages.length > 0) {
      try {
        this.transport.send(out.messages.map(wrapClassic));
      } catch (err) {
        if (!(err instanceof ClosedError)) throw err;
      }
    }
    for (const e of out.events) {
      if (e.kind === 'elected') {
        this.ledTerm = e.term;
        this.emit('elected', { term: e.term, token: makeToken(this.group, e.term) });
      } else if (e.kind === 'deposed') {
        this.ledTerm = null;
        this.emit('deposed', { term: e.term, reason: e.reason });
      } else {
        this.emit('leader', { leader: e.leader, term: e.term });
      }
    }
  }

  /** Stops: timers cancelled, nothing more sent or handled; a leader is deposed (`stopped`). Idempotent. */
  async close(): Promise<void> {
    if (this.closed) return;
    const led = this.machine.isLeader ? this.ledTerm : null;
    this.closed = true;
    for (const cancel of this.timers.values()) cancel();
    this.timers.clear();
    if (this.onAbort) this.signal?.removeEventListener('abort', this.onAbort);
    if (led !== null) {
      this.ledTerm = null;
      this.emit('deposed', { term: led, reason: 'stopped' });
    }
    await Promise.resolve();
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }
}
