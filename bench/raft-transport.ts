/**
 * Issue 24: the Raft transport alone, two transports on loopback (TCP, secret handshake, no TLS),
 * in this one process except where said (both ends then share one event loop and core).
 *
 * - Round trip: node 1 sends one `app` with a 100-byte entry, node 2's handler answers with an
 *   `appResp` at once; the sample is send to answer received. One in flight. Measured in one
 *   process, and with node 2 in a child process (bench/fixtures/transport-echo.mjs), as a
 *   cluster runs.
 * - Rate: 200,000 such appends, sent 64 per tick with at most 2,048 not yet received (below the
 *   queue bound, so nothing is dropped); messages/s and frames/s from first send to last receipt.
 * - Snapshot: a `snap` message with 64 MiB of data, sent in 1 MiB chunk frames and reassembled;
 *   MB/s from send to receipt, one sample per snapshot.
 *
 *   npm run bench -- raft-transport        (--cycles N: round trips beyond the 2,000 always taken)
 *   npx tsx bench/raft-transport.ts        (on its own, after npm run build)
 */
import { spawn } from 'node:child_process';
import { fileURLToPath, pathToFileURL } from 'node:url';
import type { Message } from '../src/raft/core/types.js';
import { freePort } from '../test/fixtures/ports.js';
import { RaftTransport } from './lib/built.js';
import { metric } from './lib/stats.js';
import type { BenchOptions, BenchResult, Benchmark } from './lib/types.js';

const SECRET = 'bench secret, sixteen bytes or more';
const RTT_SAMPLES = 2000;
const RTT_WARMUP = 500;
const RATE_MESSAGES = 200_000;
const RATE_BURST = 64;
const RATE_WINDOW = 2048;
const SNAPSHOT_BYTES = 64 * 1024 * 1024;
const SNAPSHOTS = 5;

// Literal objects of one shape, as a node builds them: a message made by spreading defaults
// (`{ ...zero, type }`) cost 4x the CPU of everything the transport did for it (measured).
const payload = new Uint8Array(100).fill(7);
const app = (i: number): Message => ({ type: 'app', from: 1, to: 2, term: 3, logTerm: 3, index: i, entries: [{ term: 3, index: i + 1, type: 'normal', data: payload }], commit: i, reject: false, rejectHint: 0 });
const appResp = (i: number): Message => ({ type: 'appResp', from: 2, to: 1, term: 3, logTerm: 0, index: i + 1, entries: [], commit: 0, reject: false, rejectHint: 0 });

async function pair(): Promise<[RaftTransport, RaftTransport]> {
  const p1 = await freePort();
  const p2 = await freePort();
  const common = { clusterId: 'bench', secret: SECRET, log: (line: string) => process.stderr.write(`${line}\n`) };
  const a = await RaftTransport.listen({ ...common, id: 1, listen: { host: '127.0.0.1', port: p1 }, peers: { 2: `127.0.0.1:${p2}` } });
  const b = await RaftTransport.listen({ ...common, id: 2, listen: { host: '127.0.0.1', port: p2 }, peers: { 1: `127.0.0.1:${p1}` } });
  return [a, b];
}

const tick = (): Promise<void> => new Promise((r) => setImmediate(r));

export interface RateNumbers {
  messagesPerSecond: number;
  framesPerSecond: number;
  messagesPerFrame: number;
  /** CPU of both ends (one process) per message, µs. */
  cpuUsPerMessage: number;
}

export interface TransportBenchNumbers {
  rttMs: number[];
  /** Round trips with node 2 in another process. */
  rtt2ProcMs: number[];
  /** RATE_BURST messages per send (framed together). */
  batched: RateNumbers;
  /** One message per send and tick: one frame per message. */
  single: RateNumbers;
  snapshotMBps: number[];
}

export async function runTransportBench(extraRtt = 0): Promise<TransportBenchNumbers> {
  const [a, b] = await pair();
  try {
    // Round trips.
    let answered: (() => void) | null = null;
    b.onMessage((m) => {
      if (m.type === 'app') b.send([appResp(m.index)]);
    });
    a.onMessage((m) => {
      if (m.type === 'appResp') answered?.();
    });
    const rttMs: number[] = [];
    const n = RTT_SAMPLES + extraRtt;
    for (let i = 0; i < RTT_WARMUP + n; i++) {
      const t0 = performance.now();
      await new Promise<void>((resolve) => {
        answered = resolve;
        a.send([app(i)]);
      });
      if (i >= RTT_WARMUP) rttMs.push(performance.now() - t0);
    }

    // Rate: b counts, nobody answers.
    let received = 0;
    b.onMessage(() => received++);
    a.onMessage(() => {});
    const rate = async (total: number, burst: number): Promise<{ messagesPerSecond: number; framesPerSecond: number; messagesPerFrame: number; cpuUsPerMessage: number }> => {
      received = 0;
      const framesBefore = a.stats().peers[0]!.sentFrames;
      const cpu0 = process.cpuUsage();
      const t0 = performance.now();
      let sent = 0;
      while (sent < total) {
        if (sent - received >= RATE_WINDOW) {
          await tick();
          continue;
        }
        const batch: Message[] = [];
        for (let k = 0; k < burst && sent < total; k++) batch.push(app(sent++));
        a.send(batch);
        await tick();
      }
      while (received < total) await tick();
      const ms = performance.now() - t0;
      const cpu = process.cpuUsage(cpu0);
      const frames = a.stats().peers[0]!.sentFrames - framesBefore;
      if (a.stats().dropped > 0) throw new Error(`raft-transport bench: ${a.stats().dropped} messages dropped`);
      return { messagesPerSecond: (total * 1000) / ms, framesPerSecond: (frames * 1000) / ms, messagesPerFrame: total / frames, cpuUsPerMessage: (cpu.user + cpu.system) / total };
    };
    const batched = await rate(RATE_MESSAGES, RATE_BURST);
    const single = await rate(RATE_MESSAGES / 4, 1);

    // Snapshots.
    const data = new Uint8Array(SNAPSHOT_BYTES).fill(3);
    const snapshotMBps: number[] = [];
    let snapDone: (() => void) | null = null;
    b.onMessage((m) => {
      if (m.type === 'snap') snapDone?.();
    });
    for (let i = 0; i < SNAPSHOTS; i++) {
      const s0 = performance.now();
      await new Promise<void>((resolve) => {
        snapDone = resolve;
        a.send([{ type: 'snap', from: 1, to: 2, term: 3, logTerm: 0, index: 0, entries: [], commit: 0, reject: false, rejectHint: 0, snapshot: { metadata: { index: 1000 + i, term: 3, confState: { voters: [1, 2], learners: [], votersOutgoing: [], learnersNext: [], autoLeave: false } }, data } }]);
      });
      snapshotMBps.push(SNAPSHOT_BYTES / (1024 * 1024) / ((performance.now() - s0) / 1000));
    }
    await Promise.all([a.close(), b.close()]);
    const rtt2ProcMs = await twoProcessRtt(n);
    return { rttMs, rtt2ProcMs, batched, single, snapshotMBps };
  } finally {
    await Promise.all([a.close(), b.close()]);
  }
}

/** Round trips to node 2 in a child process. */
async function twoProcessRtt(samples: number): Promise<number[]> {
  const p1 = await freePort();
  const p2 = await freePort();
  const script = fileURLToPath(new URL('./fixtures/transport-echo.mjs', import.meta.url));
  const child = spawn(process.execPath, [script, String(p2), String(p1), SECRET], { stdio: ['pipe', 'pipe', 'inherit'] });
  const exited = new Promise<void>((r) => child.once('exit', () => r()));
  try {
    await new Promise<void>((resolve, reject) => {
      child.once('exit', (code) => reject(new Error(`transport-echo exited with ${code} before it was ready`)));
      child.stdout.on('data', (d: Buffer) => {
        if (d.toString().includes('ready')) resolve();
      });
    });
    const a = await RaftTransport.listen({ id: 1, clusterId: 'bench', secret: SECRET, listen: { host: '127.0.0.1', port: p1 }, peers: { 2: `127.0.0.1:${p2}` }, log: (line) => process.stderr.write(`${line}\n`) });
    try {
      let answered: (() => void) | null = null;
      a.onMessage((m) => {
        if (m.type === 'appResp') answered?.();
      });
      const out: number[] = [];
      for (let i = 0; i < RTT_WARMUP + samples; i++) {
        const t0 = performance.now();
        await new Promise<void>((resolve) => {
          answered = resolve;
          a.send([app(i)]);
        });
        if (i >= RTT_WARMUP) out.push(performance.now() - t0);
      }
      return out;
    } finally {
      await a.close();
    }
  } finally {
    child.stdin.end();
    await exited;
  }
}

export function raftTransportBenchmark(): Benchmark {
  return {
    name: 'raft-transport',
    description: 'Two Raft transports on loopback in one process: 100-byte append round trip, message and frame rate, 1 MiB-chunked snapshot MB/s.',
    tags: ['raft'],
    async run(options: BenchOptions): Promise<BenchResult> {
      const started = performance.now();
      const r = await runTransportBench(options.cycles);
      const metrics = [
        metric('rtt', 'app with a 100-byte entry from node 1 to node 2, appResp back; one in flight; both in this process', r.rttMs),
        metric('rtt-2proc', 'the same with node 2 in a child process', r.rtt2ProcMs),
        metric('messages', `messages/s, ${RATE_MESSAGES} appends of 100 bytes, ${RATE_BURST} per tick, at most ${RATE_WINDOW} unreceived`, [r.batched.messagesPerSecond], undefined, 'ops/s'),
        metric('frames-1', `frames/s with one 100-byte append per send and tick (one per frame), ${RATE_MESSAGES / 4} appends`, [r.single.framesPerSecond], undefined, 'ops/s'),
        metric('snapshot', `MB/s of a ${SNAPSHOT_BYTES / (1024 * 1024)} MiB snapshot in 1 MiB chunks, send to receipt`, r.snapshotMBps, undefined, 'MB/s'),
      ];
      const notes = [
        `batched: ${r.batched.framesPerSecond.toFixed(0)} frames/s, ${r.batched.messagesPerFrame.toFixed(1)} messages per frame, ${r.batched.cpuUsPerMessage.toFixed(2)} µs CPU per message (both ends, one process)`,
        `one per frame: ${r.single.cpuUsPerMessage.toFixed(2)} µs CPU per message`,
      ];
      return { name: 'raft-transport', description: 'Raft transport on loopback', target: 'raft', params: { rttSamples: r.rttMs.length, rateMessages: RATE_MESSAGES, snapshotBytes: SNAPSHOT_BYTES }, metrics, notes, durationMs: performance.now() - started };
    },
  };
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const r = await runTransportBench();
  const sorted = [...r.rttMs].sort((x, y) => x - y);
  const pct = (xs: number[], q: number): number => xs[Math.max(0, Math.ceil(q * xs.length) - 1)]!;
  process.stdout.write(`round trip (100-byte app, appResp back), one process: p50 ${(pct(sorted, 0.5) * 1000).toFixed(0)} µs, p99 ${(pct(sorted, 0.99) * 1000).toFixed(0)} µs (n ${sorted.length})\n`);
  const sorted2 = [...r.rtt2ProcMs].sort((x, y) => x - y);
  process.stdout.write(`round trip, node 2 in a child process: p50 ${(pct(sorted2, 0.5) * 1000).toFixed(0)} µs, p99 ${(pct(sorted2, 0.99) * 1000).toFixed(0)} µs (n ${sorted2.length})\n`);
  for (const [name, x] of [
    ['batched (64 per send)', r.batched],
    ['one per send', r.single],
  ] as const) {
    process.stdout.write(`${name}: ${x.messagesPerSecond.toFixed(0)} messages/s, ${x.framesPerSecond.toFixed(0)} frames/s (${x.messagesPerFrame.toFixed(1)} per frame), ${x.cpuUsPerMessage.toFixed(2)} µs CPU per message\n`);
  }
  process.stdout.write(`snapshot 64 MiB in 1 MiB chunks: ${r.snapshotMBps.map((x) => x.toFixed(0)).join(', ')} MB/s\n`);
}
