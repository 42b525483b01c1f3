/**
 * `tenure migrate`: create or upgrade the store's tables (opening a store does it; this makes it
 * an explicit deployment step).
 */
import { parseCommand, renderHelp, stringOption } from './args.js';
import type { CommandSpec } from './args.js';
import type { CliIO } from './output.js';
import { STORE_OPTION, openCliStore, probeStore, storeTarget } from './store.js';

export const migrateSpec: CommandSpec = {
  name: 'migrate',
  usage: 'migrate [--store URL]',
  summary: 'Create or upgrade the store\'s tables.',
  options: { store: STORE_OPTION },
  examples: ['tenure migrate --store sqlite:/var/lib/tenure/tenure.db'],
};

export async function migrateCommand(argv: readonly string[], io: CliIO): Promise<number> {
  const args = parseCommand(migrateSpec, argv);
  if (args.help) {
    io.stdout.write(renderHelp(migrateSpec));
    return 0;
  }
  const target = storeTarget(stringOption(args.values, 'store'), io.env);
  const store = await openCliStore(target);
  try {
    await store.migrate();
    await probeStore(store, target, 'tenure-migrate');
  } finally {
    await store.close();
  }
  io.stdout.write(`store ${target.display} is ready\n`);
  return 0;
}
