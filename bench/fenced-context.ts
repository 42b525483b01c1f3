/**
 * Issue 22, the token context: what `runFenced` (AsyncLocalStorage) costs on this Node.
 *
 * On Node 20 an AsyncLocalStorage, once run, installs a promise hook for the whole process (Node
 * 24 carries the context in the async context frame instead): every promise pays a little from
 * then on, inside a context or not. So each sample is a fresh `node` process (the built tenure
 * from dist/) that measures, in this order:
 *
 *  - `fresh`: a chain of awaits (an async function awaiting an async function awaiting a resolved
 *    promise), before any AsyncLocalStorage ran in the process;
 *  - `outside`: the same after one `runFenced` call (the hook installed), outside any context;
 *  - `inside`: the same inside `runFenced` (the context travels with every promise);
 *  - the calls themselves: `runFenced(scope, fn)` against `fn()`, and `requireFence()` (the
 *    lookup every fenced helper makes) inside a context.
 *
 *   npx tsx bench/run.ts fenced-context
 */
import { spawn } from 'node:child_process';
import { msBetween, nowNs } from '../test/fixtures/harness.js';
import { metric } from './lib/stats.js';
import type { BenchOptions, BenchResult, Benchmark } from './lib/types.js';

const AWAITS = 200_000;
const CALLS = 1_000_000;

/** The child: prints one JSON line of operations per second. */
const CHILD = `
const fencing = await import(process.argv[1]);
const AWAITS = ${AWAITS}, CALLS = ${CALLS};
const leaf = async (i) => i;
const mid = async (i) => (await leaf(i)) + 1;
async function chain(n) { let s = 0; for (let i = 0; i < n; i++) s += await mid(i); return s; }
const rate = (n, t0) => n / (Number(process.hrtime.bigint() - t0) / 1e9);
async function awaits() { const t0 = process.hrtime.bigint(); await chain(AWAITS); return rate(AWAITS, t0); }
// Warm the chain without any AsyncLocalStorage, then measure it fresh.
await chain(AWAITS);
const fresh = await awaits();
const scope = { token: { lease: 'bench', term: 1 } };
fencing.runFenced(scope, () => 0); // the first run installs the promise hook
await chain(AWAITS);
const outside = await awaits();
const inside = await fencing.runFenced(scope, () => awaits());
let sink = 0;
const fn = () => 1;
for (let i = 0; i < CALLS; i++) sink += fn() + fencing.runFenced(scope, fn);
let t0 = process.hrtime.bigint();
for (let i = 0; i < CALLS; i++) sink += fn();
const direct = rate(CALLS, t0);
t0 = process.hrtime.bigint();
for (let i = 0; i < CALLS; i++) sink += fencing.runFenced(scope, fn);
const wrapped = rate(CALLS, t0);
const lookup = fencing.runFenced(scope, () => {
  for (let i = 0; i < CALLS; i++) sink += fencing.requireFence('bench').token.term;
  const t = process.hrtime.bigint();
  for (let i = 0; i < CALLS; i++) sink += fencing.requireFence('bench').token.term;
  return rate(CALLS, t);
});
process.stdout.write(JSON.stringify({ fresh, outside, inside, direct, wrapped, lookup, sink: sink > 0 }) + '\\n');
`;

interface Sample {
  fresh: number;
  outside: number;
  inside: number;
  direct: number;
  wrapped: number;
  lookup: number;
}

function child(): Promise<Sample> {
  const fencingUrl = new URL('../dist/src/fencing/index.js', import.meta.url).href;
  return new Promise((resolve, reject) => {
    const p = spawn(process.execPath, ['--input-type=module', '-e', CHILD, fencingUrl], { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    p.stdout.on('data', (c: Buffer) => (out += String(c)));
    p.stderr.on('data', (c: Buffer) => (err += String(c)));
    p.on('error', reject);
    p.on('exit', (code) => {
      if (code !== 0) reject(new Error(`the context child exited with ${code}: ${err.trim()} (run \`npm run build\` first)`));
      else resolve(JSON.parse(out) as Sample);
    });
  });
}

export function fencedContextBenchmark(): Benchmark {
  const name = 'fenced-context';
  const description =
    `The token context on Node ${process.versions.node}: a chain of ${AWAITS} awaits (async fn awaiting async fn) in a fresh process before any AsyncLocalStorage ran, ` +
    `after runFenced installed its hook (outside a context) and inside runFenced; runFenced(scope, fn) vs fn() and requireFence() lookups, ${CALLS} each; one process per sample.`;
  return {
    name,
    description,
    tags: ['fencing', 'context'],
    async run(options: BenchOptions): Promise<BenchResult> {
      const started = nowNs();
      const samples: Sample[] = [];
      const n = Math.max(3, Math.min(options.cycles, 20));
      for (let i = 0; i < n; i++) samples.push(await child());
      options.log(`${name}: ${n} processes done`);
      const col = (k: keyof Sample): number[] => samples.map((s) => s[k]);
      const ratio = (a: keyof Sample, b: keyof Sample): number[] => samples.map((s) => s[a] / s[b]);
      const ns = (rate: number): number => 1e9 / rate;
      const med = (xs: number[]): number => [...xs].sort((x, y) => x - y)[Math.floor((xs.length - 1) / 2)]!;
      const awaitsPer = 2; // two async calls per step of the chain
      return {
        name,
        description,
        target: 'node',
        params: { processes: n, awaits: AWAITS, calls: CALLS, node: process.versions.node },
        metrics: [
          metric('await-fresh', 'chain steps per second, before any AsyncLocalStorage ran in the process (samples: processes)', col('fresh'), undefined, 'ops/s'),
          metric('await-outside', 'chain steps per second after runFenced installed its hook, outside any context', col('outside'), undefined, 'ops/s'),
          metric('await-inside', 'chain steps per second inside runFenced', col('inside'), undefined, 'ops/s'),
          metric('outside/fresh', 'await throughput outside a context once the hook is installed / before, same process', ratio('outside', 'fresh'), undefined, 'x'),
          metric('inside/fresh', 'await throughput inside runFenced / before any AsyncLocalStorage, same process', ratio('inside', 'fresh'), undefined, 'x'),
          metric('call-direct', 'fn() calls per second', col('direct'), undefined, 'ops/s'),
          metric('call-runFenced', 'runFenced(scope, fn) calls per second (checks the token, freezes the scope, enters the context)', col('wrapped'), undefined, 'ops/s'),
          metric('requireFence', 'requireFence() lookups per second inside a context', col('lookup'), undefined, 'ops/s'),
        ],
        notes: [
          `per step of the chain (${awaitsPer} async calls, ${awaitsPer + 1} promises): ${ns(med(col('fresh'))).toFixed(0)} ns fresh, ${ns(med(col('outside'))).toFixed(0)} ns with the hook installed outside a context, ${ns(med(col('inside'))).toFixed(0)} ns inside runFenced (medians)`,
          `runFenced(scope, fn) costs ${(ns(med(col('wrapped'))) - ns(med(col('direct')))).toFixed(0)} ns over fn(); requireFence() ${ns(med(col('lookup'))).toFixed(0)} ns (medians)`,
        ],
        durationMs: msBetween(started, nowNs()),
      };
    },
  };
}
