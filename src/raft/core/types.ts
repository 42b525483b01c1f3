/**
 * The values the Raft core reads, writes and exchanges. Everything here is plain data so that a
 * node layer can encode it for a disk or a wire however it likes.
 */

/** A node's id in the group. Ids are positive integers; 0 means "nobody". */
export type NodeId = number;

/** "No node": no leader known, no vote given. */
export const NONE: NodeId = 0;

/** `normal` entries carry application data; `confChange` entries carry an encoded ConfChange. */
export type EntryType = 'normal' | 'confChange';

/** One log entry. `index` starts at 1; `term` is the leader's term when it was appended. */
export interface Entry {
  readonly term: number;
  readonly index: number;
  readonly type: EntryType;
  /** Opaque application bytes (or an encoded ConfChange); empty for the leader's no-op entry. */
  readonly data: Uint8Array;
}

/**
 * The membership of the group. Outside a joint configuration `votersOutgoing` and `learnersNext`
 * are empty. In a joint configuration decisions need a majority of `voters` AND of
 * `votersOutgoing`; `learnersNext` are voters of the outgoing half that become learners on leaving.
 */
export interface ConfState {
  readonly voters: readonly NodeId[];
  readonly learners: readonly NodeId[];
  readonly votersOutgoing: readonly NodeId[];
  readonly learnersNext: readonly NodeId[];
  /** Whether the leader leaves the joint configuration by itself once it entered it. */
  readonly autoLeave: boolean;
}

export interface SnapshotMetadata {
  /** Index and term of the last entry the snapshot covers. */
  readonly index: number;
  readonly term: number;
  /** Membership as of `index`. */
  readonly confState: ConfState;
}

export interface Snapshot {
  readonly metadata: SnapshotMetadata;
  /** The application state machine's image as of `metadata.index`. */
  readonly data: Uint8Array;
}

/** What must be durable before any message of the same Ready is sent. */
export interface HardState {
  readonly term: number;
  /** The candidate voted for in `term`, or NONE. */
  readonly vote: NodeId;
  readonly commit: number;
}

export type ConfChangeType = 'addNode' | 'addLearner' | 'removeNode';

export interface ConfChangeSingle {
  readonly type: ConfChangeType;
  readonly nodeId: NodeId;
}

/**
 * How a change is carried out:
 * - `auto`: one voter change is applied directly; anything larger goes through a joint
 *   configuration that the leader leaves by itself once it is applied.
 * - `implicit`: always joint, left automatically.
 * - `explicit`: always joint, left only when the application proposes an empty ConfChange.
 */
export type ConfChangeTransition = 'auto' | 'implicit' | 'explicit';

/** A membership change. An empty `changes` list leaves the current joint configuration. */
export interface ConfChange {
  readonly transition: ConfChangeTransition;
  readonly changes: readonly ConfChangeSingle[];
}

export type MessageType =
  // made locally, term 0 (prop, readIndex and transferLeader may be forwarded to the leader)
  | 'hup'
  | 'beat'
  | 'prop'
  | 'checkQuorum'
  | 'transferLeader'
  | 'unreachable'
  | 'snapStatus'
  | 'readIndex'
  // messages between nodes
  | 'app'
  | 'appResp'
  | 'vote'
  | 'voteResp'
  | 'preVote'
  | 'preVoteResp'
  | 'snap'
  | 'heartbeat'
  | 'heartbeatResp'
  | 'timeoutNow'
  | 'readIndexResp';

/**
 * One Raft message. Fields a type does not use keep their zero value. `term` is 0 only for
 * local messages; a pre-vote and its granting reply carry the term the candidate would take.
 */
export interface Message {
  readonly type: MessageType;
  readonly from: NodeId;
  readonly to: NodeId;
  readonly term: number;
  /** app: term of the entry at `index`; vote: candidate's last term; rejected appResp: hint term. */
  readonly logTerm: number;
  /** app: index preceding `entries`; appResp: last index matched (or the rejected index); vote: candidate's last index. */
  readonly index: number;
  readonly entries: readonly Entry[];
  readonly commit: number;
  readonly reject: boolean;
  /** Rejected appResp: the follower's guess of the highest index where the logs may agree. */
  readonly rejectHint: number;
  readonly snapshot?: Snapshot | undefined;
  /** Read-index request id; `transfer` on a vote that follows TimeoutNow. */
  readonly context?: string | undefined;
  /** transferLeader: the node to hand leadership to. */
  readonly transferee?: NodeId | undefined;
}

export type Role = 'follower' | 'preCandidate' | 'candidate' | 'leader';

/** Volatile state useful to the application; it need not be persisted. */
export interface SoftState {
  readonly lead: NodeId;
  readonly role: Role;
}

/** The answer to a read-index request: once `index` is applied locally, a read with `context` is linearizable. */
export interface ReadState {
  readonly index: number;
  readonly context: string;
}

/**
 * One batch of work for the application. Handle it in this order, then call `advance()`:
 *
 * 1. Persist `snapshot` (if any), then `entries`, then `hardState` (if any) to stable storage.
 *    After a crash the node must restart from exactly what was persisted.
 * 2. Only then send `messages`. Votes, append acknowledgements and the leader's own appends all
 *    claim that the state above is durable; sending any of them before it is persisted can lose
 *    acknowledged data or let a node vote twice in a term after a crash. (The contract is the same
 *    for every message, so the application never has to sort them.)
 * 3. Apply `snapshot` (if any) to the state machine, then `committedEntries` in order. A
 *    `confChange` entry must be passed to `applyConfChange` when it is applied.
 * 4. Serve `readStates`: a read with that context is linearizable once `index` is applied.
 */
export interface Ready {
  /** Present when leader or role changed since the previous Ready. */
  readonly softState?: SoftState | undefined;
  /** Present when term, vote or commit changed since the previous Ready. */
  readonly hardState?: HardState | undefined;
  /** Entries to append to stable storage (they may overwrite a conflicting suffix). */
  readonly entries: readonly Entry[];
  /** A snapshot received from the leader, to persist and apply before anything else. */
  readonly snapshot?: Snapshot | undefined;
  /** Entries known committed, to apply to the state machine in order. */
  readonly committedEntries: readonly Entry[];
  /** Messages to send after step 1 is durable. */
  readonly messages: readonly Message[];
  readonly readStates: readonly ReadState[];
}

export function emptyConfState(): ConfState {
  return { voters: [], learners: [], votersOutgoing: [], learnersNext: [], autoLeave: false };
}

/**
 * Messages a node makes for itself and never receives from the network. (Proposals, read-index
 * and transfer requests are also made locally, but followers forward them to the leader.)
 */
export function isLocalMessage(type: MessageType): boolean {
  return type === 'hup' || type === 'beat' || type === 'checkQuorum' || type === 'unreachable' || type === 'snapStatus';
}

/** Builds a message with zero values for every field not given. */
export function message(fields: Partial<Message> & Pick<Message, 'type'>): Message {
  return {
    from: NONE,
    to: NONE,
    term: 0,
    logTerm: 0,
    index: 0,
    entries: [],
    commit: 0,
    reject: false,
    rejectHint: 0,
    ...fields,
  };
}

/** Payload bytes of the entries, the unit of every size limit in the core. */
export function payloadSize(entries: readonly Entry[]): number {
  let total = 0;
  for (const e of entries) total += e.data.byteLength;
  return total;
}

const encoder = new TextEncoder();
const decoder = new TextDecoder();

/** Encodes a ConfChange as the data of a `confChange` entry. */
export function encodeConfChange(cc: ConfChange): Uint8Array {
  return encoder.encode(JSON.stringify({ t: cc.transition, c: cc.changes.map((c) => [c.type, c.nodeId]) }));
}

/** Decodes the data of a `confChange` entry; throws InvalidConfChangeError on malformed data. */
export function decodeConfChange(data: Uint8Array): ConfChange {
  const raw: unknown = JSON.parse(decoder.decode(data));
  if (typeof raw !== 'object' || raw === null) throw new TypeError('conf change: expected an object');
  const { t, c } = raw as { t?: unknown; c?: unknown };
  if (t !== 'auto' && t !== 'implicit' && t !== 'explicit') throw new TypeError(`conf change: bad transition ${String(t)}`);
  if (!Array.isArray(c)) throw new TypeError('conf change: expected a list of changes');
  const changes: ConfChangeSingle[] = c.map((item: unknown) => {
    if (!Array.isArray(item) || item.length !== 2) throw new TypeError('conf change: expected [type, nodeId]');
    const [type, nodeId] = item as [unknown, unknown];
    if (type !== 'addNode' && type !== 'addLearner' && type !== 'removeNode') throw new TypeError(`conf change: bad type ${String(type)}`);
    if (typeof nodeId !== 'number' || !Number.isInteger(nodeId) || nodeId <= 0) throw new TypeError(`conf change: bad node id ${String(nodeId)}`);
    return { type, nodeId };
  });
  return { transition: t, changes };
}
