/**
 * `tenure demo-node` (internal): one node of `tenure demo`. It campaigns for the demo group and,
 * while leader, writes fenced entries over the demo's path (`--via`: the demo stream by default).
 * It reports what happens to it as JSON lines on stdout for the demo to show and check.
 *
 * On SIGUSR2 the leader freezes itself with SIGSTOP at one chosen point of its work loop: after
 * checking that it leads and before its next write. That is where a long GC pause or a frozen VM
 * hurts, and because SQLite calls are synchronous it is also a point where this process holds no
 * database lock, so its freeze cannot block the other nodes' transactions.
 */
import { readFileSync, rmSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import { InvalidArgumentError, StaleTermError, checkName, checkOwner, limits } from '../core/index.js';
import { LeaderElector } from '../election/index.js';
import { durationOption, parseCommand, renderHelp, stringOption } from './args.js';
import type { CommandSpec } from './args.js';
import { pauseUnlessAborted } from './child.js';
import type { CliIO } from './output.js';
import { STORE_OPTION, openCliStore, storeTarget } from './store.js';
import { DEMO_PATHS, openDemoWriter } from './demo-writer.js';
import type { DemoVia } from './demo-writer.js';

export const demoNodeSpec: CommandSpec = {
  name: 'demo-node',
  hidden: true,
  usage: 'demo-node --store URL --group G --stream S --id ID [--ttl D] [--interval D] [--via PATH --target T]',
  summary: 'One node of `tenure demo` (internal; reports JSON lines on stdout).',
  options: {
    store: STORE_OPTION,
    group: { type: 'string', value: 'G', help: 'the group to lead' },
    stream: { type: 'string', value: 'S', help: 'the stream the leader appends to' },
    id: { type: 'string', value: 'ID', help: 'node id' },
    ttl: { type: 'string', value: 'D', help: 'lease time to live (default 1s)' },
    interval: { type: 'string', value: 'D', help: 'time between appends while leader (default 80ms)' },
    via: { type: 'string', value: 'PATH', help: `how the leader writes: ${DEMO_PATHS.join(', ')} (default stream)` },
    target: { type: 'string', value: 'T', help: 'where the resource is, for --via other than stream (a SQLite file, a URL)' },
    channel: { type: 'string', value: 'NAME', help: 'the demo run\'s name on the broker (nats, amqp, mqtt)' },
    'demo-dir': { type: 'string', value: 'DIR', help: 'the demo\'s temporary directory, cleaned up if the demo dies' },
  },
  required: ['store', 'group', 'stream', 'id'],
  examples: ['tenure demo-node --store sqlite:/tmp/demo.db --group demo --stream demo --id node-1'],
};

/** In the demo's directory: the pids of its node processes, as a JSON array. */
export const NODES_FILE = 'nodes.json';

export type DemoNodeEvent =
  | { event: 'hello'; owner: string; pid: number }
  | { event: 'elected'; term: number }
  | { event: 'deposed'; term: number; reason: string }
  | { event: 'freezing'; term: number }
  | { event: 'resumed'; term: number }
  | { event: 'freeze-skipped' }
  | { event: 'stale'; term: number; currentTerm: number; message: string }
  | { event: 'store-error'; message: string }
  | { event: 'stopped' };

export async function demoNodeCommand(argv: readonly string[], io: CliIO): Promise<number> {
  const args = parseCommand(demoNodeSpec, argv);
  if (args.help) {
    io.stdout.write(renderHelp(demoNodeSpec));
    return 0;
  }
  const { values } = args;
  const group = checkName('--group', stringOption(values, 'group'));
  const stream = checkName('--stream', stringOption(values, 'stream'));
  const id = checkOwner('--id', stringOption(values, 'id'));
  const ttlMs = durationOption(values, 'ttl', 1000, limits.ttlMinMs, limits.ttlMaxMs);
  const intervalMs = durationOption(values, 'interval', 80, 1, 60_000);
  const via = (stringOption(values, 'via') ?? 'stream') as DemoVia;
  if (!DEMO_PATHS.includes(via)) throw new InvalidArgumentError('--via', `expected one of ${DEMO_PATHS.join(', ')}, got '${via}'`);
  const store = await openCliStore(storeTarget(stringOption(values, 'store'), io.env));
  const writer = await openDemoWriter({ via, store, stream, id, target: stringOption(values, 'target'), channel: stringOption(values, 'channel') });
  const elector = new LeaderElector({ store, group, id, ttlMs });

  let lastError = '';
  elector.on('elected', ({ term }) => say({ event: 'elected', term }));
  elector.on('deposed', ({ term, reason }) => say({ event: 'deposed', term, reason }));
  elector.on('store-error', ({ error }) => {
    if (error.message !== lastError) say({ event: 'store-error', message: (lastError = error.message) });
  });

  let freezeRequested = false;
  process.on('SIGUSR2', () => {
    if (elector.isLeader) freezeRequested = true;
    else say({ event: 'freeze-skipped' });
  });

  const life = demoProcessLife();

  say({ event: 'hello', owner: elector.owner, pid: process.pid });
  void elector.runWhileLeader(async ({ signal, token }) => {
    let n = 0;
    while (!signal.aborted) {
      if (freezeRequested) {
        freezeRequested = false;
        say({ event: 'freezing', term: token.term });
        process.kill(process.pid, 'SIGSTOP');
        // Resumed (SIGCONT). This node still believes it leads and goes on to write.
        say({ event: 'resumed', term: token.term });
      }
      try {
        await writer.write(token, JSON.stringify({ node: id, owner: elector.owner, n: ++n }));
      } catch (err) {
        if (err instanceof StaleTermError) {
          say({ event: 'stale', term: err.term, currentTerm: err.currentTerm, message: err.message });
          // A newer term has written: step down rather than wait for the renewal to fail.
          void elector.resign();
          return;
        }
        say({ event: 'store-error', message: (err as Error).message });
      }
      await pauseUnlessAborted(intervalMs, signal);
    }
  });

  await life.stopped;
  await elector.stop();
  await writer.close();
  await store.close();
  life.cleanUp(stringOption(values, 'demo-dir'));
  say({ event: 'stopped' });
  return 0;
}

/** How a process of the demo ends: `stopped` resolves on SIGTERM, SIGINT, or the demo gone. */
export interface DemoProcessLife {
  readonly stopped: Promise<void>;
  /** After stopping: if the demo died without stopping us, resume our siblings and remove its directory. */
  cleanUp(demoDir: string | undefined): void;
}

export function demoProcessLife(): DemoProcessLife {
  let stop: () => void = () => {};
  let orphaned = false;
  const stopped = new Promise<void>((resolve) => (stop = resolve));
  process.once('SIGTERM', () => stop());
  process.once('SIGINT', () => stop());
  // The demo talks to us through a pipe; when it goes away (even killed), so do we.
  const onOrphaned = (): void => {
    orphaned = true;
    stop();
  };
  process.stdin.on('end', onOrphaned);
  process.stdin.on('error', onOrphaned);
  process.stdin.resume();
  return {
    stopped,
    cleanUp: (demoDir) => {
      if (orphaned && demoDir !== undefined) cleanUpAfterDemo(demoDir);
    },
  };
}

/**
 * The demo died without stopping us (kill -9). A node it had frozen would stay stopped forever:
 * resume every sibling (each then sees its own pipe closed and exits), then remove the demo's
 * temporary directory.
 */
function cleanUpAfterDemo(dir: string): void {
  try {
    const pids = JSON.parse(readFileSync(join(dir, NODES_FILE), 'utf8')) as unknown;
    if (Array.isArray(pids)) {
      for (const pid of pids) {
        if (typeof pid !== 'number' || pid === process.pid) continue;
        try {
          process.kill(pid, 'SIGCONT');
        } catch {
          // gone already
        }
      }
    }
  } catch {
    // no list: nothing to resume
  }
  try {
    rmSync(dir, { recursive: true, force: true, maxRetries: 3 });
  } catch {
    // another node is removing it too
  }
}

function say(event: DemoNodeEvent): void {
  sayLine(event);
}

/** One JSON line on stdout, written synchronously so it is out before a SIGSTOP. */
export function sayLine(event: object): void {
  const data = Buffer.from(`${JSON.stringify(event)}\n`);
  let offset = 0;
  for (let tries = 0; offset < data.length && tries < 1000; tries++) {
    try {
      offset += writeSync(1, data, offset);
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if (code === 'EAGAIN') continue;
      process.exit(0); // the demo is gone (EPIPE)
    }
  }
}
