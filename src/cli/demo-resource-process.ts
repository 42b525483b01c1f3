/**
 * `tenure demo-resource` (internal): the resource of `tenure demo --via http|nats|amqp|mqtt`, in a
 * process of its own, as another service would be. It owns the demo row (a SQLite file, see
 * demo-ledger.ts) and is where the fence is checked:
 *
 * - `http`: a node:http server with tenure's fence middleware; the handler runs the guard's check
 *   in the same SQLite transaction as its write, so a stale token is a 409 and nothing is written;
 * - `nats`, `amqp`, `mqtt`: a fenced consumer that applies each message to the row in the same
 *   transaction as its ledger of the highest term, and drops a lower term's message.
 *
 * It reports JSON lines on stdout (ready, refused, error) and stops when the demo closes its stdin
 * or sends SIGTERM.
 */
import { writeSync } from 'node:fs';
import { checkName } from '../core/index.js';
import { parseCommand, renderHelp, stringOption } from './args.js';
import type { CommandSpec } from './args.js';
import { openLedger } from './demo-ledger.js';
import { serveResource } from './demo-resource-paths.js';
import type { ResourceContext, ServedResource } from './demo-resource-paths.js';
import { RESOURCE_PATHS } from './demo-writer.js';
import type { CliIO } from './output.js';

export const demoResourceSpec: CommandSpec = {
  name: 'demo-resource',
  hidden: true,
  usage: 'demo-resource --via PATH --db FILE --group G [--broker URL --channel NAME]',
  summary: 'The resource of `tenure demo --via` (internal; reports JSON lines on stdout).',
  options: {
    via: { type: 'string', value: 'PATH', help: `the path: ${RESOURCE_PATHS.join(', ')}` },
    db: { type: 'string', value: 'FILE', help: 'the SQLite file of the demo row' },
    group: { type: 'string', value: 'G', help: 'the group whose terms fence the writes' },
    broker: { type: 'string', value: 'URL', help: 'the broker (nats, amqp, mqtt)' },
    channel: { type: 'string', value: 'NAME', help: 'the subject, queue or topic the leader publishes to' },
  },
  required: ['via', 'db', 'group'],
  examples: ['tenure demo-resource --via http --db /tmp/service.db --group demo'],
};

export type DemoResourceEvent =
  /** Listening (`url`: the HTTP endpoint) or subscribed: the nodes may write. */
  | { event: 'ready'; url?: string }
  /** A write refused where it landed: a lower term than the row's (`node`: its writer, from the payload). */
  | { event: 'refused'; term: number; currentTerm: number; node: string | null; message: string }
  /** Could not start (the broker unreachable, say): the demo stops with this message. */
  | { event: 'failed'; message: string }
  | { event: 'error'; message: string }
  | { event: 'stopped' };

export async function demoResourceCommand(argv: readonly string[], io: CliIO): Promise<number> {
  const args = parseCommand(demoResourceSpec, argv);
  if (args.help) {
    io.stdout.write(renderHelp(demoResourceSpec));
    return 0;
  }
  const { values } = args;
  const viaText = stringOption(values, 'via');
  const via = RESOURCE_PATHS.find((p) => p === viaText);
  if (!via) throw new Error(`demo-resource: --via must be one of ${RESOURCE_PATHS.join(', ')}`);
  const group = checkName('--group', stringOption(values, 'group'));
  const db = openLedger(stringOption(values, 'db') ?? '', 1000);

  let stop: () => void = () => {};
  const stopped = new Promise<void>((resolve) => (stop = resolve));
  process.once('SIGTERM', () => stop());
  process.once('SIGINT', () => stop());
  process.stdin.on('end', () => stop());
  process.stdin.on('error', () => stop());
  process.stdin.resume();

  let lastError = '';
  const ctx: ResourceContext = {
    via,
    group,
    db,
    broker: stringOption(values, 'broker'),
    channel: stringOption(values, 'channel'),
    refused: (error, payload) => say({ event: 'refused', term: error.term, currentTerm: error.currentTerm, node: writerOf(payload), message: error.message }),
    error: (message) => {
      if (message !== lastError) say({ event: 'error', message: (lastError = message) });
    },
  };
  let served: ServedResource;
  try {
    served = await serveResource(ctx);
  } catch (err) {
    say({ event: 'failed', message: (err as Error).message });
    db.close();
    return 1;
  }
  say({ event: 'ready', ...(served.url !== undefined ? { url: served.url } : {}) });
  await stopped;
  await served.close().catch((err: unknown) => ctx.error((err as Error).message));
  db.close();
  say({ event: 'stopped' });
  return 0;
}

/** The node that wrote `payload` (the demo's payloads are `{ node, owner, n }`), if it says. */
function writerOf(payload: string | null): string | null {
  if (payload === null) return null;
  try {
    const node = (JSON.parse(payload) as { node?: unknown }).node;
    return typeof node === 'string' ? node : null;
  } catch {
    return null;
  }
}

/** One JSON line on stdout, written synchronously. */
function say(event: DemoResourceEvent): void {
  try {
    writeSync(1, `${JSON.stringify(event)}\n`);
  } catch {
    process.exit(0); // the demo is gone (EPIPE)
  }
}
