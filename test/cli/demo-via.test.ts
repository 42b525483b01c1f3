/**
 * `tenure demo --via http|nats|amqp|mqtt` with real processes, against a real HTTP service process
 * and the brokers on this machine: the frozen leader resumes and writes with its old term; the
 * service's guard (409) or the fenced consumer (a process of its own) refuses it, and the row's
 * history shows no stale write. An unreachable broker is one line and exit code 1; a broker URL
 * of the wrong kind is bad input (exit 2).
 */
import { spawn } from 'node:child_process';
import { connect } from 'nats';
import { afterAll, describe, expect, it } from 'vitest';
import { expectTheStory } from './demo-story.js';
import type { DemoSummaryJson } from './demo-story.js';
import { BIN, cleanUp, processAlive, sandbox, tenure, waitUntil } from './helpers.js';

afterAll(cleanUp);

const NATS_URL = process.env.TENURE_TEST_NATS_URL ?? 'nats://127.0.0.1:4222';
const AMQP_URL = process.env.TENURE_TEST_AMQP_URL ?? 'amqp://guest:guest@127.0.0.1:5672';
const MQTT_URL = process.env.TENURE_TEST_MQTT_URL ?? 'mqtt://127.0.0.1:1883';
const BROKERS = [
  { via: 'nats', url: NATS_URL, name: 'NATS', down: 'nats://127.0.0.1:1' },
  { via: 'amqp', url: AMQP_URL, name: 'RabbitMQ', down: 'amqp://guest:hunter2@127.0.0.1:1' },
  { via: 'mqtt', url: MQTT_URL, name: 'MQTT', down: 'mqtt://127.0.0.1:1' },
] as const;

async function demoStreamsOnNats(): Promise<string[]> {
  const nc = await connect({ servers: NATS_URL });
  try {
    const jsm = await nc.jetstreamManager();
    const names: string[] = [];
    for await (const s of jsm.streams.list()) if (s.config.name.startsWith('tenure-demo-')) names.push(s.config.name);
    return names;
  } finally {
    await nc.close();
  }
}

describe('tenure demo over HTTP', () => {
  it('--via http: the resumed leader\'s request is refused with 409 by the service\'s guard, and the row\'s history has no stale write', { timeout: 120_000 }, async () => {
    const box = sandbox();
    const r = await tenure(box, ['demo', '--via', 'http', '--duration', '4', '--json'], { timeoutMs: 110_000 });
    expect(r.code, r.stderr).toBe(0);
    const summary = JSON.parse(r.stdout) as DemoSummaryJson;
    expect(summary.via).toBe('http');
    expectTheStory(summary);
    expect(summary.pids.length).toBeGreaterThanOrEqual(5); // the service, three nodes and the restarted one
  });

  it('the plain view names the service and the 409', { timeout: 120_000 }, async () => {
    const box = sandbox();
    const r = await tenure(box, ['demo', '--via', 'http', '--duration', '3'], { timeoutMs: 110_000 });
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toMatch(/writes: fencedFetch POST http:\/\/127\.0\.0\.1:\d+\/demo; the service's guard checks the token in its SQLite transaction/);
    expect(r.stdout).toMatch(/node-\d's write refused by the service \(409\): stale fencing token: term \d+ < \d+ for group demo/);
    // Counted once, by the service: the node hearing the 409 is only noted.
    expect(r.stdout).toMatch(/stale writes refused {2}1\n/);
  });
});

describe('tenure demo over a broker', () => {
  for (const b of BROKERS) {
    it(`--via ${b.via}: the resumed leader's publish is dropped by the consumer, and the row's history has no stale write`, { timeout: 120_000 }, async () => {
      const box = sandbox();
      const r = await tenure(box, ['demo', '--via', b.via, '--broker', b.url, '--duration', '4', '--json'], { timeoutMs: 110_000 });
      expect(r.code, r.stderr).toBe(0);
      const summary = JSON.parse(r.stdout) as DemoSummaryJson;
      expect(summary.via).toBe(b.via);
      expectTheStory(summary);
      expect(summary.pids.length).toBeGreaterThanOrEqual(5); // the consumer, three nodes and the restarted one
    });

    it(`--via ${b.via} with the broker unreachable: one line naming it, exit code 1, no credential shown`, { timeout: 30_000 }, async () => {
      const box = sandbox();
      const r = await tenure(box, ['demo', '--via', b.via, '--broker', b.down, '--json'], { timeoutMs: 25_000 });
      expect(r.code).toBe(1);
      expect(r.stdout).toBe('');
      const lines = r.stderr.trim().split('\n');
      expect(lines).toHaveLength(1);
      expect(lines[0]).toMatch(new RegExp(`^tenure demo: cannot reach ${b.name} at ${b.via}://`));
      expect(r.stderr).not.toContain('hunter2');
    });
  }

  it('the plain view says where the publish was refused', { timeout: 120_000 }, async () => {
    const box = sandbox();
    const r = await tenure(box, ['demo', '--via', 'nats', '--broker', NATS_URL, '--duration', '3'], { timeoutMs: 110_000 });
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toContain('writes: JetStream publishes on');
    expect(r.stdout).toMatch(/node-\d's write refused at the consumer \(dropped, never applied\): stale fencing token: term \d+ < \d+ for group demo/);
    expect(r.stdout).toContain('written via  nats');
    // The run's stream is deleted when the demo ends.
    expect(await demoStreamsOnNats()).toEqual([]);
  });

  it('leaves no process and no stream behind when killed (SIGKILL) while a node is frozen', { timeout: 120_000 }, async () => {
    const box = sandbox();
    const demo = spawn(process.execPath, [BIN, 'demo', '--via', 'nats', '--broker', NATS_URL, '--duration', '20'], { cwd: box.dir, env: box.env, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    demo.stdout.on('data', (d: Buffer) => (out += d.toString()));
    const exited = new Promise<void>((resolve) => demo.on('close', () => resolve()));
    await waitUntil('a node to be frozen', () => / frozen \(SIGSTOP\)/.test(out), 60_000);
    const pids = [...out.matchAll(/started \(pid (\d+)\)/g)].map((m) => Number(m[1]));
    expect(pids.length).toBe(4); // the consumer and three nodes
    demo.kill('SIGKILL');
    await exited;
    // The consumer and the nodes see their pipe close: the frozen node is resumed, all stop,
    // and the consumer deletes the run's stream on its way out.
    await waitUntil('every process to be gone', () => pids.every((pid) => !processAlive(pid)), 30_000);
    await waitUntil('the run\'s stream to be deleted', async () => (await demoStreamsOnNats()).length === 0, 10_000);
  });

  it('TENURE_DEMO_BROKER points the demo elsewhere too', { timeout: 30_000 }, async () => {
    const box = sandbox();
    const r = await tenure(box, ['demo', '--via', 'mqtt', '--json'], { env: { ...box.env, TENURE_DEMO_BROKER: 'mqtt://127.0.0.1:1' }, timeoutMs: 25_000 });
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/^tenure demo: cannot reach MQTT at mqtt:\/\/127\.0\.0\.1:1: /);
  });

  it('a broker URL of another kind, or --broker without a broker path, is bad input (exit 2)', async () => {
    const box = sandbox();
    const cases = [
      { args: ['--via', 'nats', '--broker', 'amqp://127.0.0.1:5672'], says: /--broker: --via nats needs a URL starting nats:\/\/ or tls:\/\/, got 'amqp:\/\/127\.0\.0\.1:5672'/ },
      { args: ['--via', 'amqp', '--broker', 'not a url'], says: /--broker: expected a RabbitMQ URL/ },
      { args: ['--via', 'sql', '--broker', 'nats://127.0.0.1:4222'], says: /--broker: is for --via nats, amqp, mqtt, not --via sql/ },
      { args: ['--via', 'amqp', '--broker', 'mqtt://u:topsecret@127.0.0.1:1883'], says: /--via amqp needs a URL starting amqp:\/\/ or amqps:\/\// },
    ];
    for (const c of cases) {
      const r = await tenure(box, ['demo', ...c.args, '--json']);
      expect(r.code, r.stderr).toBe(2);
      expect(r.stdout).toBe('');
      expect(r.stderr.trim().split('\n')).toHaveLength(1);
      expect(r.stderr).toMatch(c.says);
      expect(r.stderr).not.toContain('topsecret');
    }
  });
});
