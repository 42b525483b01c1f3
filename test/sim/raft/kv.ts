/**
 * The replicated state machine of the simulation: a few integer registers, written and
 * compare-and-set through the Raft log. Each client numbers its commands; a command whose number
 * is not above the client's last applied one is a duplicate (a proposal the network delivered
 * twice, or a retry) and is not applied again, so every command takes effect at most once.
 */
import { INITIAL_VALUE } from './linearizability.js';

export type Command =
  | { readonly client: number; readonly seq: number; readonly key: string; readonly kind: 'write'; readonly value: number }
  | { readonly client: number; readonly seq: number; readonly key: string; readonly kind: 'cas'; readonly expected: number; readonly value: number };

const encoder = new TextEncoder();
const decoder = new TextDecoder();

export function encodeCommand(c: Command): Uint8Array {
  return encoder.encode(JSON.stringify(c));
}

export function decodeCommand(data: Uint8Array): Command {
  return JSON.parse(decoder.decode(data)) as Command;
}

/** The outcome of applying a command: `applied` false for a duplicate. */
export interface Outcome {
  readonly applied: boolean;
  /** write: true; cas: whether it swapped. For a duplicate of the last command: its first outcome. */
  readonly result: boolean | undefined;
}

export class KvState {
  private readonly data = new Map<string, number>();
  /** Per client: the last command number applied and its result. */
  private readonly sessions = new Map<number, { seq: number; result: boolean }>();

  get(key: string): number {
    return this.data.get(key) ?? INITIAL_VALUE;
  }

  apply(c: Command): Outcome {
    const s = this.sessions.get(c.client);
    if (s !== undefined && c.seq <= s.seq) return { applied: false, result: c.seq === s.seq ? s.result : undefined };
    let result = true;
    if (c.kind === 'write') {
      this.data.set(c.key, c.value);
    } else if (this.get(c.key) === c.expected) {
      this.data.set(c.key, c.value);
    } else {
      result = false;
    }
    this.sessions.set(c.client, { seq: c.seq, result });
    return { applied: true, result };
  }

  encode(): Uint8Array {
    const data = [...this.data.entries()].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    const sessions = [...this.sessions.entries()].sort(([a], [b]) => a - b);
    return encoder.encode(JSON.stringify({ data, sessions }));
  }

  static decode(bytes: Uint8Array): KvState {
    const kv = new KvState();
    if (bytes.byteLength === 0) return kv;
    const raw = JSON.parse(decoder.decode(bytes)) as { data: [string, number][]; sessions: [number, { seq: number; result: boolean }][] };
    for (const [k, v] of raw.data) kv.data.set(k, v);
    for (const [c, s] of raw.sessions) kv.sessions.set(c, s);
    return kv;
  }
}
