/**
 * `tenure demo`: the command line (options, checks) and the choice of story. The stories are
 * Demo (demo.ts: failover, and the machinery every story shares) and FollowersDemo
 * (demo-followers.ts), which extends it; this module imports both, so neither imports the other's
 * user.
 */
import { InvalidArgumentError, parseDuration } from '../core/index.js';
import { durationOption, flagOption, integerOption, parseCommand, renderHelp, stringOption } from './args.js';
import type { CommandSpec } from './args.js';
import { BROKER_PATHS, brokerUrl } from './demo-brokers.js';
import { Demo } from './demo.js';
import type { DemoOptions } from './demo.js';
import { FollowersDemo } from './demo-followers.js';
import { DEMO_PATHS } from './demo-writer.js';
import type { DemoVia } from './demo-writer.js';
import type { CliIO } from './output.js';
import { storeTarget } from './store.js';
import type { StoreTarget } from './store.js';

const DEFAULT_NODES = 3;
/** `--scenario followers`: the leader and one standby. */
const DEFAULT_CANDIDATES = 2;
const FOLLOWERS = 3;
const DEFAULT_DURATION_MS = 15_000;
const DEFAULT_TTL_MS = 1000;
/** `--store raft`: not a URL but a Raft store the demo starts itself (three tenure raft serve processes). */
const RAFT_STORE = 'raft';

/** The stories the demo can tell (`--scenario`); the first is the default. */
export const DEMO_SCENARIOS = ['failover', 'followers'] as const;
export type DemoScenario = (typeof DEMO_SCENARIOS)[number];

export const demoSpec: CommandSpec = {
  name: 'demo',
  usage: `demo [--scenario ${DEMO_SCENARIOS.join('|')}] [--nodes N] [--duration S] [--ttl D] [--store URL] [--via ${DEMO_PATHS.join('|')}] [--broker URL] [--json]`,
  summary: 'Watch election, takeover, a stale write refused and crash failover, live.',
  description: [
    'Starts N node processes on a fresh temporary SQLite store; the leader writes fenced entries.\n' +
      'The demo freezes the leader (SIGSTOP) past its TTL, shows the takeover with a higher term,\n' +
      'resumes the old leader and shows its stale write refused, then kills the new leader (kill -9)\n' +
      'and shows crash failover. It ends with a summary and checks: failover times, terms, refused\n' +
      'stale writes, entries and any safety violation. No process is left behind.',
    '--store URL runs the same story on a store of yours (postgres://, mysql://, redis://, etcd://,\n' +
      'sqlite:FILE) instead of the fresh temporary SQLite file. The run takes a group and stream of\n' +
      'its own, demo-<random>, so it never touches a lease or stream already there; the stream it\n' +
      'wrote stays in the store (a fenced stream is a log: tenure never deletes one). TENURE_STORE is\n' +
      'not read: a demo goes to a real store only when asked by name. --via sql needs the row beside\n' +
      'the leases, so it runs on SQLite stores only.',
    '--store raft runs it on a Raft store of the demo\'s own: three `tenure raft serve` processes on\n' +
      'free loopback ports, with data directories in the demo\'s temporary directory and a random\n' +
      'secret (TENURE_RAFT_SECRET in their environment). They are stopped and removed at the end, and\n' +
      'on ^C, after the nodes.',
    '--via picks the write path the story runs over: stream (tenure\'s fenced stream, the default);\n' +
      'sql (fencedUpdate of a row in SQLite: the check is in the UPDATE); http (fencedFetch to a\n' +
      'service process whose guard checks the token in its write\'s transaction, 409 when stale);\n' +
      'nats (JetStream), amqp (RabbitMQ), mqtt (MQTT v5): the token rides in the message metadata\n' +
      'and a fenced consumer, a process of its own, drops a lower term\'s message. The checks read\n' +
      'the resource\'s own record of the writes it applied (the stream, the row\'s history), never\n' +
      'the writers\' reports. The brokers default to this machine\'s (nats://127.0.0.1:4222,\n' +
      'amqp://guest:guest@127.0.0.1:5672, mqtt://127.0.0.1:1883); --broker URL or TENURE_DEMO_BROKER\n' +
      'points elsewhere. An unreachable broker is one line and exit code 1.',
    '--scenario followers tells the other half: a leader and a standby append fenced entries while\n' +
      'three follower processes apply the log to SQLite projections of their own and advertise their\n' +
      'lag. One follower is killed (kill -9) mid-apply and restarted; the leader is frozen and replaced;\n' +
      'a read router sends reads to a follower within the lag threshold, else to the leader. The\n' +
      'summary compares each projection with the log, and shows the lag over time and the reads routed.\n' +
      'With it, --nodes is the number of candidate leaders (default 2); --via is stream only.',
    'On a terminal the view is live; otherwise it prints plain lines, or with --json one JSON summary\n' +
      '{ ok, failovers, terms, staleRejected, entries, violations, ... }. Exit code 0 when every step\n' +
      'happened and no violation was found, 1 otherwise, 130 when interrupted.',
  ],
  options: {
    scenario: { type: 'string', value: 'NAME', help: `the story: ${DEMO_SCENARIOS.join(', ')} (default failover)` },
    nodes: { type: 'string', value: 'N', help: `number of node processes, 2 to 9 (default ${DEFAULT_NODES}; with --scenario followers: candidate leaders, default ${DEFAULT_CANDIDATES})` },
    duration: { type: 'string', value: 'S', help: 'how long to run, in seconds or as 20s, 1m (default 15; the steps take about 8 s)' },
    ttl: { type: 'string', value: 'D', help: 'lease time to live (default 1s)' },
    store: { type: 'string', value: 'URL', help: 'run on this store instead of a fresh temporary SQLite file (TENURE_STORE is not read); raft: a 3-member Raft store of its own' },
    via: { type: 'string', value: 'PATH', help: `the write path: ${DEMO_PATHS.join(', ')} (default stream)` },
    broker: { type: 'string', value: 'URL', help: 'the broker for --via nats, amqp, mqtt (default: $TENURE_DEMO_BROKER, else the one on this machine)' },
    json: { type: 'boolean', help: 'print one JSON summary instead of the live view' },
  },
  examples: ['npx tenure demo', 'tenure demo --nodes 5 --duration 30 --json', 'tenure demo --store postgres://localhost/app', 'tenure demo --store raft', 'tenure demo --via sql', 'tenure demo --via nats --broker nats://10.0.0.5:4222', 'tenure demo --scenario followers'],
};

export async function demoCommand(argv: readonly string[], io: CliIO): Promise<number> {
  const args = parseCommand(demoSpec, argv);
  if (args.help) {
    io.stdout.write(renderHelp(demoSpec));
    return 0;
  }
  const scenario = parseScenario(stringOption(args.values, 'scenario'));
  const nodeCount = integerOption(args.values, 'nodes', scenario === 'followers' ? DEFAULT_CANDIDATES : DEFAULT_NODES, 2, 9);
  const durationMs = parseSeconds(stringOption(args.values, 'duration'));
  const ttlMs = durationOption(args.values, 'ttl', DEFAULT_TTL_MS, 100, 60_000);
  const json = flagOption(args.values, 'json');
  const via = parseVia(stringOption(args.values, 'via'));
  if (scenario === 'followers' && via !== 'stream') throw new InvalidArgumentError('--via', `--scenario followers replicates the store's stream: --via stream only, got '${via}'`);
  const brokerFlag = stringOption(args.values, 'broker');
  const brokerVia = BROKER_PATHS.find((p) => p === via);
  if (brokerFlag !== undefined && !brokerVia) throw new InvalidArgumentError('--broker', `is for --via ${BROKER_PATHS.join(', ')}, not --via ${via}`);
  const broker = brokerVia ? brokerUrl(brokerVia, brokerFlag, io.env) : undefined;
  const storeFlag = stringOption(args.values, 'store');
  const raft = storeFlag === RAFT_STORE;
  if (raft && via === 'sql') throw new InvalidArgumentError('--store', `--via sql writes a row beside the SQLite leases table; --store raft is a Raft store: use --via stream, http, nats, amqp or mqtt`);
  const store = raft ? undefined : demoStore(storeFlag, via, io.env);
  const followers = scenario === 'followers' ? FOLLOWERS : 0;
  const options: DemoOptions = { nodeCount, durationMs, ttlMs, json, via, broker, store, followers, raft };
  return scenario === 'followers' ? new FollowersDemo(io, options).run() : new Demo(io, options).run();
}

/** `--duration`: a bare number is seconds; otherwise a duration such as 20s or 1m. */
function parseSeconds(text: string | undefined): number {
  if (text === undefined) return DEFAULT_DURATION_MS;
  const ms = /^\s*\d+(\.\d+)?\s*$/.test(text) ? Math.round(Number(text) * 1000) : parseDuration('--duration', text);
  if (ms < 1000 || ms > 3_600_000) throw new InvalidArgumentError('--duration', `must be between 1 s and 1 h, got '${text}'`);
  return ms;
}

/** `--scenario`: one of the stories, exactly. */
function parseScenario(text: string | undefined): DemoScenario {
  if (text === undefined) return 'failover';
  const scenario = DEMO_SCENARIOS.find((s) => s === text);
  if (!scenario) throw new InvalidArgumentError('--scenario', `expected one of ${DEMO_SCENARIOS.join(', ')}, got '${text}'`);
  return scenario;
}

/** `--via`: one of the write paths, exactly. */
function parseVia(text: string | undefined): DemoVia {
  if (text === undefined) return 'stream';
  const via = DEMO_PATHS.find((p) => p === text);
  if (!via) throw new InvalidArgumentError('--via', `expected one of ${DEMO_PATHS.join(', ')}, got '${text}'`);
  return via;
}

/**
 * `--store`: checked before anything starts. The nodes are processes, so a store they cannot
 * share (memory:) is refused; `--via sql` keeps its row next to the SQLite leases table its
 * UPDATE reads the term from. `TENURE_STORE` is deliberately not a default here.
 */
function demoStore(flag: string | undefined, via: DemoVia, env: NodeJS.ProcessEnv): StoreTarget | undefined {
  if (flag === undefined) return undefined;
  const target = storeTarget(flag, env);
  if (target.options.kind === 'memory') {
    throw new InvalidArgumentError('--store', `memory: lives inside one process, and each demo node is a process of its own; pick a store they can share`);
  }
  if (via === 'sql' && target.options.kind !== 'sqlite') {
    throw new InvalidArgumentError('--store', `--via sql writes a row beside the SQLite leases table; ${target.display} is ${target.options.kind}: use --via stream, http, nats, amqp or mqtt`);
  }
  return target;
}
