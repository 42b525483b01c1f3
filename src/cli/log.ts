/**
 * `tenure log`: the entries of a fenced stream with sequence number, token and payload;
 * `--follow` keeps printing new ones.
 */
import { checkName } from '../core/index.js';
import type { StreamEntry } from '../core/index.js';
import { flagOption, integerOption, parseCommand, renderHelp, stringOption } from './args.js';
import type { CommandSpec } from './args.js';
import { signalExitCode } from './child.js';
import { printable } from './output.js';
import type { CliIO } from './output.js';
import { onTermination } from './signals.js';
import type { TerminationSignal } from './signals.js';
import { ONE_SHOT_BUSY_TIMEOUT_MS } from './status.js';
import { STORE_OPTION, openCliStore, storeTarget } from './store.js';

const PAGE = 10_000;
const FOLLOW_POLL_MS = 200;

export const logSpec: CommandSpec = {
  name: 'log',
  usage: 'log --stream S [--after N] [--limit N] [--store URL] [--json] [--follow]',
  summary: 'Print the entries of stream S: sequence number, the token (LEASE#TERM) that wrote it, payload.',
  description: [
    'With --json, one JSON object { seq, lease, term, payload } per line. --follow keeps\nprinting new entries until interrupted.',
    '--after N starts after entry N (0: from the first); --limit N stops after N entries, with --follow\ntoo. A long stream is read a page at a time, never whole.',
  ],
  options: {
    stream: { type: 'string', value: 'S', help: 'the stream to read' },
    store: STORE_OPTION,
    json: { type: 'boolean', help: 'JSON lines' },
    follow: { type: 'boolean', short: 'f', help: 'keep printing new entries' },
    after: { type: 'string', value: 'N', help: 'start after entry N (default 0: from the first)' },
    limit: { type: 'string', value: 'N', help: 'print at most N entries, then exit' },
  },
  required: ['stream'],
  examples: ['tenure log --stream invoices', 'tenure log --stream invoices --after 1200 --limit 50', 'tenure log --stream invoices --follow --json'],
};

export async function logCommand(argv: readonly string[], io: CliIO): Promise<number> {
  const args = parseCommand(logSpec, argv);
  if (args.help) {
    io.stdout.write(renderHelp(logSpec));
    return 0;
  }
  const stream = checkName('--stream', stringOption(args.values, 'stream'));
  const json = flagOption(args.values, 'json');
  const follow = flagOption(args.values, 'follow');
  const start = integerOption(args.values, 'after', 0, 0, Number.MAX_SAFE_INTEGER);
  const limit = stringOption(args.values, 'limit') === undefined ? Infinity : integerOption(args.values, 'limit', 1, 1, Number.MAX_SAFE_INTEGER);
  const target = storeTarget(stringOption(args.values, 'store'), io.env);
  const store = await openCliStore(target, ONE_SHOT_BUSY_TIMEOUT_MS);
  let received: TerminationSignal | null = null;
  let wake: () => void = () => {};
  const removeHandlers = follow
    ? onTermination({
        stop: (sig) => {
          received = sig;
          wake();
        },
      })
    : () => {};
  const print = (e: StreamEntry): void => {
    io.stdout.write(
      json
        ? `${JSON.stringify({ seq: e.seq, lease: e.lease, term: e.term, payload: e.payload })}\n`
        : `${String(e.seq).padStart(6)}  ${printable(e.lease)}#${e.term}  ${printable(e.payload)}\n`,
    );
  };
  try {
    let after = start;
    let left = limit;
    for (;;) {
      const page = Math.min(PAGE, left);
      const entries = await store.readStream(stream, { after, limit: page });
      for (const e of entries) print(e);
      after = entries.at(-1)?.seq ?? after;
      left -= entries.length;
      if (left === 0) break;
      if (entries.length === page) continue;
      if (!follow || received) break;
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, FOLLOW_POLL_MS);
        wake = () => {
          clearTimeout(timer);
          resolve();
        };
      });
      if (received) break;
    }
  } finally {
    removeHandlers();
    await store.close();
  }
  // A reader that went away (`tenure log --follow | head`) is a normal end.
  return received && received !== 'SIGPIPE' ? signalExitCode(received) : 0;
}
