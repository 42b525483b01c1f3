/**
 * `tenure append`: one fenced append. The store refuses a token older than the newest term it
 * has accepted for that lease, in the same transaction as the write; that refusal is exit code 3.
 */
import { InvalidArgumentError, checkName, limits } from '../core/index.js';
import { parseToken } from '../fencing/index.js';
import { integerOption, parseCommand, renderHelp, stringOption } from './args.js';
import type { CommandSpec } from './args.js';
import type { CliIO } from './output.js';
import { ONE_SHOT_BUSY_TIMEOUT_MS } from './status.js';
import { STORE_OPTION, openCliStore, storeTarget } from './store.js';
import { UsageError } from './args.js';

export const appendSpec: CommandSpec = {
  name: 'append',
  usage: 'append --stream S --token TOKEN [--expect-seq N] [--store URL] [DATA | -]',
  summary: 'Append DATA to stream S, fenced by TOKEN; prints the entry\'s sequence number.',
  description: [
    'TOKEN is LEASE#TERM, as `tenure run` and `tenure lock` put it in $TENURE_TOKEN. With - (or no\n' +
      'DATA and standard input not a terminal) the entry is read from standard input.',
    'With --expect-seq N the append is a compare-and-set on the stream\'s head: it is written only if\n' +
      'the stream\'s last entry is N (0: empty), checked in the same step as the token; otherwise nothing\n' +
      'is written and the current head is named on stderr (exit 1).',
    'Exit codes: 0 appended; 3 stale fencing token (a newer term has written: nothing was appended);\n' +
      '2 bad input (a token that does not parse, or a term never issued); 1 store failure, or the\n' +
      'stream\'s head was not --expect-seq.',
  ],
  options: {
    stream: { type: 'string', value: 'S', help: 'the stream to append to' },
    token: { type: 'string', value: 'TOKEN', help: 'fencing token LEASE#TERM, e.g. "$TENURE_TOKEN"' },
    'expect-seq': { type: 'string', value: 'N', help: 'append only if the stream\'s last seq is N (0: empty)' },
    store: STORE_OPTION,
  },
  required: ['stream', 'token'],
  positionals: { min: 0, max: 1, label: 'DATA' },
  examples: ['tenure run --group billing -- sh -c \'tenure append --stream invoices --token "$TENURE_TOKEN" "invoice 42"\''],
};

export async function appendCommand(argv: readonly string[], io: CliIO, stdin: NodeJS.ReadStream): Promise<number> {
  const args = parseCommand(appendSpec, argv);
  if (args.help) {
    io.stdout.write(renderHelp(appendSpec));
    return 0;
  }
  const stream = checkName('--stream', stringOption(args.values, 'stream'));
  const token = parseToken(stringOption(args.values, 'token') ?? '');
  const expectSeq = stringOption(args.values, 'expect-seq') === undefined ? undefined : integerOption(args.values, 'expect-seq', 0, 0, Number.MAX_SAFE_INTEGER);
  const target = storeTarget(stringOption(args.values, 'store'), io.env);
  const data = args.positionals[0];
  let payload: string;
  if (data !== undefined && data !== '-') payload = data;
  else if (data === undefined && stdin.isTTY) throw new UsageError('missing DATA: give it as an argument, or - to read standard input');
  else payload = await readAll(stdin);
  const store = await openCliStore(target, ONE_SHOT_BUSY_TIMEOUT_MS);
  try {
    const seq = await store.appendFenced(token, stream, payload, expectSeq === undefined ? undefined : { expectSeq });
    io.stdout.write(`${seq}\n`);
    return 0;
  } finally {
    await store.close();
  }
}

/**
 * Standard input as the entry's text: refused (bad input, nothing appended) when it is longer than
 * an entry may be, found while reading (not after holding all of it), or not UTF-8 (decoding it
 * anyway would store U+FFFD in place of the bytes, silently).
 */
async function readAll(input: NodeJS.ReadStream): Promise<string> {
  const chunks: Buffer[] = [];
  let bytes = 0;
  for await (const chunk of input) {
    const b = typeof chunk === 'string' ? Buffer.from(chunk) : (chunk as Buffer);
    bytes += b.length;
    if (bytes > limits.payloadMaxBytes) {
      input.destroy();
      throw new InvalidArgumentError('payload', `must be at most ${limits.payloadMaxBytes} bytes; standard input has more`);
    }
    chunks.push(b);
  }
  try {
    return new TextDecoder('utf-8', { fatal: true, ignoreBOM: true }).decode(Buffer.concat(chunks));
  } catch {
    throw new InvalidArgumentError('payload', 'standard input is not UTF-8 text; an entry is text: encode binary data first (base64, say)');
  }
}
