/**
 * Where tenure keeps things in etcd, and how values are written.
 *
 * Candidate keys follow etcd's own `clientv3/concurrency` recipes exactly: the candidates for a
 * lease (election, lock) named N are the keys `N/<etcd lease id in lowercase hex>`, each attached
 * to its etcd lease; the one with the lowest create revision holds it. That is the layout of Go's
 * `concurrency.NewElection(s, "N")` and `concurrency.NewMutex(s, "N")`, hence `etcdctl elect N`
 * and `etcdctl lock N`.
 *
 * Everything else tenure needs (the per-name term counter, the fence, fenced streams) lives under
 * `\0tenure/`, a prefix no candidate key can have: names never contain control characters.
 * An optional namespace is prepended to every key.
 */
import type { LeaseMeta } from '../../core/index.js';

const INTERNAL = '\u0000tenure/';
/** Stream positions are zero-padded so that key order is numeric order. */
const SEQ_DIGITS = 16;
/** A lease id as etcd's Go client writes it in a key: `%x` of the int64. */
const HEX_ID = /^[0-9a-f]{1,16}$/;
// eslint-disable-next-line no-control-regex
const CONTROL = /[\u0000-\u001f\u007f-\u009f]/;

/** The etcd lease id (a decimal int64 string, as the etcd3 package returns it) in lowercase hex. */
export function leaseIdHex(id: string): string {
  return BigInt(id).toString(16);
}

/** Whether two lease ids name the same lease, whichever spelling the client handed back. */
export function sameLease(a: string, b: string): boolean {
  try {
    return BigInt(a) === BigInt(b);
  } catch {
    return a === b;
  }
}

/** etcd refuses an empty key; "\0" starts a range at the first key. */
export function rangeStart(prefix: Buffer): Buffer {
  return prefix.length > 0 ? prefix : Buffer.from([0]);
}

/** The first key after every key that starts with `prefix` (etcd's `WithPrefix` range end). */
export function prefixEnd(prefix: Buffer): Buffer {
  const end = Buffer.from(prefix);
  for (let i = end.length - 1; i >= 0; i--) {
    if (end[i]! < 0xff) {
      end[i] = end[i]! + 1;
      return end.subarray(0, i + 1);
    }
  }
  return Buffer.from([0]); // every key: etcd reads a range end of "\0" as "to the end"
}

export class KeyLayout {
  /** The namespace, prepended to every key ('' by default, so etcdctl sees the same names). */
  readonly namespace: string;

  constructor(namespace: string) {
    this.namespace = namespace;
  }

  /** The prefix of a name's candidates, `N/`: Go's `keyPrefix` for the election or mutex `N`. */
  candidates(name: string): Buffer {
    return Buffer.from(`${this.namespace}${name}/`);
  }

  candidate(name: string, leaseId: string): Buffer {
    return Buffer.from(`${this.namespace}${name}/${leaseIdHex(leaseId)}`);
  }

  /** Every key whose name starts with `prefix`, candidates and foreign keys alike. */
  namesFrom(prefix: string): Buffer {
    return Buffer.from(`${this.namespace}${prefix}`);
  }

  /**
   * The name a candidate key belongs to, or null for a key that is not `N/<hex>` for a valid
   * name N. A key splits at its last '/', so a key belongs to exactly one name even when names
   * nest ("jobs" and "jobs/a").
   */
  nameOf(key: Buffer): string | null {
    const text = key.toString();
    if (!text.startsWith(this.namespace)) return null;
    const rest = text.slice(this.namespace.length);
    const slash = rest.lastIndexOf('/');
    if (slash <= 0) return null;
    const name = rest.slice(0, slash);
    if (!HEX_ID.test(rest.slice(slash + 1)) || CONTROL.test(name)) return null;
    return name;
  }

  /** The term counter of a name: the last term the store issued, as decimal text. */
  term(name: string): Buffer {
    return Buffer.from(`${this.namespace}${INTERNAL}term/${name}`);
  }

  terms(prefix: string): Buffer {
    return Buffer.from(`${this.namespace}${INTERNAL}term/${prefix}`);
  }

  nameOfTerm(key: Buffer): string {
    return key.toString().slice(`${this.namespace}${INTERNAL}term/`.length);
  }

  /**
   * The waiting room of a name: `\0tenure/wait/N\0<lease hex>`, one key per tenure candidate that
   * waits on a watch, attached to the etcd lease it would hold with, valued like a candidate
   * (term 0). Not under `N/`, so Go and etcdctl never count it as a candidate.
   */
  waiters(name: string): Buffer {
    return Buffer.from(`${this.namespace}${INTERNAL}wait/${name}\u0000`);
  }

  waiter(name: string, leaseId: string): Buffer {
    return Buffer.from(`${this.namespace}${INTERNAL}wait/${name}\u0000${leaseIdHex(leaseId)}`);
  }

  /**
   * What `purge(prefix)` deletes by range besides the candidates: the term counters, fences,
   * waiting rooms and stream entries of every name or stream starting with `prefix`.
   */
  internalFrom(prefix: string): Buffer[] {
    return ['term', 'fence', 'wait', 'stream'].map((kind) => Buffer.from(`${this.namespace}${INTERNAL}${kind}/${prefix}`));
  }

  /** The fence of a name: the highest term a fenced write has carried, as decimal text. */
  fence(name: string): Buffer {
    return Buffer.from(`${this.namespace}${INTERNAL}fence/${name}`);
  }

  /** Entries of a stream: `\0tenure/stream/S\0<seq>`; the NUL ends the name so streams never overlap. */
  entries(stream: string): Buffer {
    return Buffer.from(`${this.namespace}${INTERNAL}stream/${stream}\u0000`);
  }

  entry(stream: string, seq: number): Buffer {
    return Buffer.from(`${this.namespace}${INTERNAL}stream/${stream}\u0000${String(seq).padStart(SEQ_DIGITS, '0')}`);
  }

  seqOf(key: Buffer): number {
    return Number(key.toString().slice(-SEQ_DIGITS));
  }
}

/** What a tenure candidate writes as its value: who it is, its term, its TTL and its meta. */
export interface TenureValue {
  readonly owner: string;
  readonly term: number;
  readonly ttlMs: number;
  readonly meta: LeaseMeta;
  /**
   * Put by a hand-over whose txn found no hand-over hint held (`handover.ts`): the winner need not
   * read one (`AcquireResult.noTransferHint`). Older versions ignore the field.
   */
  readonly noHint?: boolean;
}

export function encodeValue(v: TenureValue): Buffer {
  return Buffer.from(JSON.stringify({ tenure: 1, owner: v.owner, term: v.term, ttlMs: v.ttlMs, meta: v.meta, ...(v.noHint === true ? { noHint: true } : {}) }));
}

/**
 * A tenure value, or null for anything else (a Go election's proclaimed value, a Go mutex's
 * empty value): such a holder is foreign, and tenure reports it without owning it.
 */
export function decodeValue(value: Buffer | undefined): TenureValue | null {
  if (!value || value.length === 0 || value[0] !== 0x7b) return null;
  try {
    const v = JSON.parse(value.toString()) as Partial<TenureValue> & { tenure?: unknown };
    if (v.tenure !== 1 || typeof v.owner !== 'string' || typeof v.term !== 'number' || typeof v.ttlMs !== 'number') return null;
    const meta = typeof v.meta === 'object' && v.meta !== null ? v.meta : {};
    return { owner: v.owner, term: v.term, ttlMs: v.ttlMs, meta, ...(v.noHint === true ? { noHint: true } : {}) };
  } catch {
    return null;
  }
}
