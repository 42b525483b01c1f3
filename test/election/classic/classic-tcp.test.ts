/**
 * The classic elections over the real Raft transport: 4 nodes on loopback TCP, every connection
 * authenticated with the cluster secret. Bully elects the highest id, and the next highest once
 * the leader is killed, in a newer term; Ring's token goes round and elects the highest id, and
 * again without the killed leader. Hostile frames from an authenticated peer (garbage, a term
 * that disagrees with the frame's, huge ids, a coordinator for a term its leader does not own)
 * are refused with one clear error each, and the node keeps running.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { ClassicElector, type ClassicAlgorithm } from '../../../src/election/classic/driver.js';
import { ElectionMessageError, encodeClassic } from '../../../src/election/classic/messages.js';
import type { Message } from '../../../src/raft/core/types.js';
import { RaftTransport } from '../../../src/raft/transport/transport.js';
import { freePort } from '../../fixtures/ports.js';

const SECRET = 'classic election test secret';
const TIMING = { heartbeatMs: 50, leaderTimeoutMs: 400, answerTimeoutMs: 200, roundTimeoutMs: 1500 };

interface Member {
  readonly id: number;
  readonly transport: RaftTransport;
  readonly elector: ClassicElector;
  readonly logs: string[];
  readonly terms: number[];
}

const open: Member[] = [];

afterEach(async () => {
  for (const m of open.splice(0)) {
    await m.elector.close();
    await m.transport.close();
  }
});

async function cluster(algorithm: ClassicAlgorithm, ids: readonly number[]): Promise<Member[]> {
  const ports = new Map<number, number>();
  for (const id of ids) ports.set(id, await freePort());
  const clusterId = `classic-${algorithm}-${ports.get(ids[0]!)}`;
  const members: Member[] = [];
  for (const id of ids) {
    const logs: string[] = [];
    const transport = await RaftTransport.listen({
      id,
      clusterId,
      secret: SECRET,
      listen: { host: '127.0.0.1', port: ports.get(id)! },
      peers: Object.fromEntries(ids.filter((p) => p !== id).map((p) => [p, `127.0.0.1:${ports.get(p)}`])),
      log: (line) => logs.push(line),
      reconnectMinMs: 10,
      reconnectMaxMs: 100,
    });
    const terms: number[] = [];
    const elector = new ClassicElector({ algorithm, transport, members: ids, timing: TIMING, log: (line) => logs.push(line), persistTerm: (t) => terms.push(t) });
    const m = { id, transport, elector, logs, terms };
    members.push(m);
    open.push(m);
  }
  for (const m of members) m.elector.start();
  return members;
}

/** Where each member stands, for a timeout's message. */
function states(): string {
  return open.map((m) => `node ${m.id}: leader ${String(m.elector.leader)}, term ${m.elector.term}${m.elector.isLeader ? ', leads' : ''}`).join('; ');
}

async function until(what: string, cond: () => boolean, ms = 20_000): Promise<void> {
  const deadline = performance.now() + ms;
  while (!cond()) {
    if (performance.now() > deadline) throw new Error(`timed out after ${ms} ms waiting for ${what} (${states()})`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

/** Every live member follows `leader`, which alone leads, all in one term. */
function settledOn(members: readonly Member[], leader: number): boolean {
  const terms = new Set(members.map((m) => m.elector.term));
  return terms.size === 1 && members.every((m) => m.elector.leader === leader && m.elector.isLeader === (m.id === leader));
}

async function kill(members: Member[], id: number): Promise<Member[]> {
  const victim = members.find((m) => m.id === id)!;
  await victim.elector.close();
  await victim.transport.close();
  open.splice(open.indexOf(victim), 1);
  return members.filter((m) => m !== victim);
}

describe.each<ClassicAlgorithm>(['bully', 'ring'])('%s election over the Raft transport (4 nodes, loopback TCP)', (algorithm) => {
  it('elects the highest id; with the leader killed, the next highest in a newer term', async () => {
    const ids = [3, 8, 21, 1000];
    let members = await cluster(algorithm, ids);
    await until('node 1000 to lead and everyone to follow it', () => settledOn(members, 1000));
    const first = members.find((m) => m.id === 1000)!.elector;
    const firstToken = first.token();
    expect(firstToken).not.toBeNull();
    expect(firstToken!.term).toBe(first.term);

    members = await kill(members, 1000);
    await until('node 21 to lead the three left', () => settledOn(members, 21));
    const second = members.find((m) => m.id === 21)!.elector;
    // The new winner's fencing token is newer than the dead leader's: a fence refuses the old one.
    expect(second.token()!.term).toBeGreaterThan(firstToken!.term);
    // Every node persisted terms that never went back.
    for (const m of members) expect([...m.terms].sort((a, b) => a - b)).toEqual(m.terms);
    for (const m of members) expect(m.elector.refused).toBe(0);
  });
});

describe('hostile frames from an authenticated peer', () => {
  it('are refused with one clear error each, and the election goes on', async () => {
    const ids = [1, 2, 3];
    const members = await cluster('bully', ids);
    await until('node 3 to lead', () => settledOn(members, 3));
    const target = members.find((m) => m.id === 2)!;
    const refused: ElectionMessageError[] = [];
    target.elector.on('refused', (r) => refused.push(r.error));
    const attacker = members.find((m) => m.id === 1)!;

    const frameOf = (data: Uint8Array, term = 0, type: Message['type'] = 'app'): Message => ({
      type,
      from: 1,
      to: 2,
      term,
      logTerm: 0,
      index: 0,
      entries: [{ term: 0, index: 0, type: 'normal', data }],
      commit: 0,
      reject: false,
      rejectHint: 0,
    });
    const huge = [1, 0, ...Array<number>(12).fill(0xff), 0x01]; // version 1, election, a from id of 13 varint bytes
    const coordinator = encodeClassic({ kind: 'coordinator', from: 1, to: 2, term: 5, leader: 1 }); // term 5 of 3 nodes is node 3's
    attacker.transport.send([
      frameOf(Uint8Array.from([0xde, 0xad, 0xbe, 0xef])), // garbage
      frameOf(encodeClassic({ kind: 'election', from: 1, to: 2, term: 7 }), 8), // the frame's term disagrees with the message's
      frameOf(Uint8Array.from(huge)), // an id larger than any safe integer
      frameOf(coordinator, 5), // a coordinator for a term its leader does not own
      frameOf(encodeClassic({ kind: 'election', from: 1, to: 3, term: 0 })), // addressed to another node
      frameOf(Uint8Array.from([1, 0, 1, 2, 0, 9])), // bytes after the end
      frameOf(Uint8Array.from([1, 0, 1, 2, 0]), 0, 'heartbeat'), // not the election's frame type
    ]);
    await until('seven refusals', () => refused.length >= 7, 5000);
    expect(refused.every((e) => e instanceof ElectionMessageError && e.code === 'FRAME_INVALID')).toBe(true);
    const text = refused.map((e) => e.message).join('\n');
    expect(text).toMatch(/version 222/);
    expect(text).toMatch(/of term 7 inside a frame of term 8/);
    expect(text).toMatch(/longer than 8 bytes/);
    expect(text).toMatch(/term 5, which node 1 does not own/);
    expect(text).toMatch(/an election from 1 to 3 inside a frame from 1 to 2/);
    expect(text).toMatch(/1 bytes after the end/);
    expect(text).toMatch(/got a heartbeat message/);
    expect(target.logs.filter((l) => l.includes('refused a frame from peer 1'))).toHaveLength(7);
    // Still running, still following node 3.
    await new Promise((r) => setTimeout(r, 300));
    expect(settledOn(members, 3)).toBe(true);
  });
});
