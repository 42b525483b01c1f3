/**
 * A linearizability checker for a history of key-value register operations: the algorithm of
 * Wing & Gong (1993) with Lowe's improvements (2017) — just-in-time linearization (only an
 * operation whose call precedes the first pending return is a candidate) and memoization of the
 * (linearized set, state) pairs already explored. A history of several keys is checked one key at
 * a time (P-compositionality: a history is linearizable iff each key's sub-history is).
 *
 * An operation whose outcome the client never learned (`ret` undefined, "ambiguous") may take
 * effect at any point after its call, or never; it is given a return at +infinity and any output,
 * and taking effect after every other operation is the same as never taking effect.
 */

export type KvOp =
  | { readonly kind: 'read' }
  | { readonly kind: 'write'; readonly value: number }
  | { readonly kind: 'cas'; readonly expected: number; readonly value: number };

export interface Operation {
  /** Unique in the history. */
  readonly id: number;
  readonly client: number;
  readonly key: string;
  readonly op: KvOp;
  /** read: the value read; cas: whether it swapped; write: true. Undefined when ambiguous. */
  readonly output: number | boolean | undefined;
  /** Logical time of the invocation and of the response (undefined: none seen, ambiguous). */
  readonly call: number;
  readonly ret: number | undefined;
}

/** The register's value before any write. */
export const INITIAL_VALUE = 0;

/** The sequential specification: the state after `o` from `state`, or undefined if `o`'s output is impossible there. */
export function step(state: number, o: Operation): number | undefined {
  switch (o.op.kind) {
    case 'read':
      return o.output === undefined || o.output === state ? state : undefined;
    case 'write':
      return o.op.value;
    case 'cas': {
      const swaps = state === o.op.expected;
      if (o.output === undefined) return swaps ? o.op.value : state;
      if (o.output !== swaps) return undefined;
      return swaps ? o.op.value : state;
    }
  }
}

export function describeOp(o: Operation): string {
  const out = o.output === undefined ? '?' : String(o.output);
  const when = `[${o.call}, ${o.ret === undefined ? '∞ (ambiguous)' : o.ret}]`;
  let what: string;
  switch (o.op.kind) {
    case 'read':
      what = `read ${o.key} -> ${out}`;
      break;
    case 'write':
      what = `write ${o.key}=${o.op.value}${o.ret === undefined ? ' -> ?' : ''}`;
      break;
    case 'cas':
      what = `cas ${o.key} ${o.op.expected}->${o.op.value} -> ${out}`;
      break;
  }
  return `op#${o.id} client ${o.client} ${what} ${when}`;
}

/** Why one key's history is not linearizable: the longest linearizable prefix found and what blocked it. */
export interface Counterexample {
  readonly key: string;
  /** The operations of the longest linearization found, in order. */
  readonly prefix: readonly Operation[];
  /** The register value after `prefix`. */
  readonly state: number;
  /** The operation whose response came before it could be placed. */
  readonly blocked: Operation;
  /** Operations not in `prefix` invoked before `blocked` returned: the candidates that all failed. */
  readonly candidates: readonly Operation[];
}

export interface CheckResult {
  readonly ok: boolean;
  /** One per key that is not linearizable. */
  readonly counterexamples: readonly Counterexample[];
}

interface Node {
  readonly isCall: boolean;
  readonly op: number;
  readonly time: number;
  match: Node | undefined;
  prev: Node | undefined;
  next: Node | undefined;
}

/** A set of operation indexes with a cheap string key for the memo table. */
class BitSet {
  private readonly words: Uint32Array;
  constructor(n: number) {
    this.words = new Uint32Array(Math.ceil(n / 32) + 1);
  }
  set(i: number): void {
    this.words[i >>> 5]! |= 1 << (i & 31);
  }
  clear(i: number): void {
    this.words[i >>> 5]! &= ~(1 << (i & 31));
  }
  key(state: number): string {
    return `${this.words.join(',')}|${state}`;
  }
}

function lift(n: Node): void {
  n.prev!.next = n.next;
  if (n.next !== undefined) n.next.prev = n.prev;
  const m = n.match!;
  m.prev!.next = m.next;
  if (m.next !== undefined) m.next.prev = m.prev;
}

function unlift(n: Node): void {
  const m = n.match!;
  m.prev!.next = m;
  if (m.next !== undefined) m.next.prev = m;
  n.prev!.next = n;
  if (n.next !== undefined) n.next.prev = n;
}

/** Checks one key's operations. Returns undefined when linearizable, else a counterexample. */
export function checkKey(key: string, ops: readonly Operation[], initial = INITIAL_VALUE): Counterexample | undefined {
  if (ops.length === 0) return undefined;
  // Calls and returns in time order; ambiguous returns go last (at +infinity), in call order.
  const events: Node[] = [];
  ops.forEach((o, i) => {
    const call: Node = { isCall: true, op: i, time: o.call, match: undefined, prev: undefined, next: undefined };
    const ret: Node = { isCall: false, op: i, time: o.ret ?? Number.POSITIVE_INFINITY, match: undefined, prev: undefined, next: undefined };
    call.match = ret;
    events.push(call, ret);
  });
  events.sort((a, b) => a.time - b.time || (a.isCall === b.isCall ? a.op - b.op : a.isCall ? -1 : 1));
  const head: Node = { isCall: false, op: -1, time: Number.NEGATIVE_INFINITY, match: undefined, prev: undefined, next: undefined };
  let prev = head;
  for (const e of events) {
    prev.next = e;
    e.prev = prev;
    prev = e;
  }

  const linearized = new BitSet(ops.length);
  const seen = new Set<string>();
  const stack: { node: Node; state: number }[] = [];
  let state = initial;
  let best: { prefix: number[]; state: number; blocked: number; candidates: number[] } | undefined;
  let entry = head.next;
  while (head.next !== undefined) {
    const e = entry!;
    if (e.isCall) {
      const next = step(state, ops[e.op]!);
      if (next !== undefined) {
        linearized.set(e.op);
        const k = linearized.key(next);
        if (!seen.has(k)) {
          seen.add(k);
          stack.push({ node: e, state });
          state = next;
          lift(e);
          entry = head.next;
          continue;
        }
        linearized.clear(e.op);
      }
      entry = e.next;
      continue;
    }
    // A return before its call was linearized: every candidate failed at this point. Backtrack.
    if (best === undefined || stack.length > best.prefix.length) {
      const candidates: number[] = [];
      for (let n: Node | undefined = head.next; n !== undefined && n !== e; n = n.next) if (n.isCall) candidates.push(n.op);
      best = { prefix: stack.map((s) => s.node.op), state, blocked: e.op, candidates };
    }
    const top = stack.pop();
    if (top === undefined) {
      return {
        key,
        prefix: best.prefix.map((i) => ops[i]!),
        state: best.state,
        blocked: ops[best.blocked]!,
        candidates: best.candidates.map((i) => ops[i]!),
      };
    }
    state = top.state;
    linearized.clear(top.node.op);
    unlift(top.node);
    entry = top.node.next;
  }
  return undefined;
}

/** Checks a whole history key by key. */
export function checkHistory(history: readonly Operation[]): CheckResult {
  const byKey = new Map<string, Operation[]>();
  for (const o of history) {
    let list = byKey.get(o.key);
    if (list === undefined) byKey.set(o.key, (list = []));
    list.push(o);
  }
  const counterexamples: Counterexample[] = [];
  for (const key of [...byKey.keys()].sort()) {
    const c = checkKey(key, byKey.get(key)!);
    if (c !== undefined) counterexamples.push(c);
  }
  return { ok: counterexamples.length === 0, counterexamples };
}

/** The non-linearizable part of a history, for a report. */
export function describeCounterexample(c: Counterexample, prefixTail = 6): string[] {
  const lines = [`key ${c.key}: not linearizable`];
  const shown = c.prefix.slice(-prefixTail);
  lines.push(`  longest linearization found: ${c.prefix.length} ops${c.prefix.length > shown.length ? `, the last ${shown.length}` : ''}, value after it ${c.state}:`);
  for (const o of shown) lines.push(`    ${describeOp(o)}`);
  lines.push(`  cannot place before its response: ${describeOp(c.blocked)}`);
  lines.push(`  none of the candidates fits (invoked before that response, not yet linearized):`);
  for (const o of c.candidates) lines.push(`    ${describeOp(o)}`);
  return lines;
}
