/**
 * The real `etcdctl` (etcd-client) as a child process: `elect` and `lock` hold while running and
 * resign / unlock on SIGINT, as a Go service using clientv3/concurrency would.
 */
import { spawn } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';
import { killWithParent } from './etcd-harness.js';

export interface Etcdctl {
  readonly process: ChildProcess;
  /** Everything it printed so far. */
  output(): string;
  /** Resolve when its output contains `text`. */
  waitFor(text: string | RegExp, timeoutMs?: number): Promise<string>;
  /** SIGINT (graceful: resign / unlock) and wait for it to exit. */
  stop(): Promise<void>;
}

const running = new Set<ChildProcess>();
process.on('exit', () => {
  for (const p of running) p.kill('SIGKILL');
});

export function etcdctl(endpoints: readonly string[], args: string[]): Etcdctl {
  const p = spawn('etcdctl', ['--endpoints', endpoints.join(','), ...args], { env: { ...process.env, ETCDCTL_API: '3' }, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  p.stdout.on('data', (d: Buffer) => (out += d.toString()));
  p.stderr.on('data', (d: Buffer) => (out += d.toString()));
  running.add(p);
  if (p.pid !== undefined) killWithParent(p.pid);
  const exited = new Promise<void>((r) => p.once('exit', () => r()));
  void exited.then(() => running.delete(p));
  return {
    process: p,
    output: () => out,
    async waitFor(text, timeoutMs = 10_000) {
      const start = Date.now();
      while (!(typeof text === 'string' ? out.includes(text) : text.test(out))) {
        if (Date.now() - start > timeoutMs) throw new Error(`etcdctl ${args.join(' ')}: '${String(text)}' not seen in ${timeoutMs} ms; output: ${out}`);
        if (p.exitCode !== null) throw new Error(`etcdctl ${args.join(' ')} exited ${p.exitCode}: ${out}`);
        await new Promise((r) => setTimeout(r, 10));
      }
      return out;
    },
    async stop() {
      if (p.exitCode === null && p.signalCode === null) p.kill('SIGINT');
      await exited;
    },
  };
}
