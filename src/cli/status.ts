/**
 * `tenure status`: every live lease (or one group's) with owner, term, time left and meta.
 */
import { InvalidArgumentError, checkName } from '../core/index.js';
import type { Lease } from '../core/index.js';
import { partitionOwners } from '../election/index.js';
import { flagOption, parseCommand, renderHelp, stringOption } from './args.js';
import type { CommandSpec } from './args.js';
import { formatMs, printTable, printable } from './output.js';
import type { CliIO } from './output.js';
import { STORE_OPTION, openCliStore, storeTarget } from './store.js';

/**
 * One-shot commands may wait this long for other processes' SQLite transactions, ms: they have no
 * lease deadline to keep, so they wait longer than a store's calls do by default.
 */
export const ONE_SHOT_BUSY_TIMEOUT_MS = 10_000;

export const statusSpec: CommandSpec = {
  name: 'status',
  usage: 'status [--store URL] [--group G | --partitions NAME] [--json]',
  summary: 'Show the live leases: name, owner, term, time until expiry, and meta.',
  description: [
    'With --json, prints one JSON array of { name, owner, term, expiresInMs, ttlMs, meta }.',
    'With --partitions NAME, shows the shard ownership per node of the partition set NAME (JSON: { name, nodes: [{ id, member, shards }] }).',
  ],
  options: {
    store: STORE_OPTION,
    group: { type: 'string', value: 'G', help: 'only this group (lease name)' },
    partitions: { type: 'string', value: 'NAME', help: 'shard ownership per node of a partition set' },
    json: { type: 'boolean', help: 'print JSON' },
  },
  examples: ['tenure status', 'tenure status --group billing --json', 'tenure status --partitions orders'],
};

export async function statusCommand(argv: readonly string[], io: CliIO): Promise<number> {
  const args = parseCommand(statusSpec, argv);
  if (args.help) {
    io.stdout.write(renderHelp(statusSpec));
    return 0;
  }
  const groupText = stringOption(args.values, 'group');
  const group = groupText === undefined ? undefined : checkName('--group', groupText);
  const partitionsText = stringOption(args.values, 'partitions');
  const partitions = partitionsText === undefined ? undefined : checkName('--partitions', partitionsText);
  if (partitions !== undefined && group !== undefined) throw new InvalidArgumentError('--partitions', 'give --group or --partitions, not both');
  const target = storeTarget(stringOption(args.values, 'store'), io.env);
  // Read-only: a mistyped path is an error (exit 1), never a new directory and database.
  const store = await openCliStore(target, ONE_SHOT_BUSY_TIMEOUT_MS, true);
  let leases: Lease[];
  try {
    if (partitions !== undefined) {
      leases = await store.list(`${partitions}/`);
    } else if (group !== undefined) {
      const lease = await store.read(group);
      leases = lease ? [lease] : [];
    } else {
      leases = await store.list();
    }
  } finally {
    await store.close();
  }
  if (partitions !== undefined) return printPartitions(partitions, leases, flagOption(args.values, 'json'), io);
  if (flagOption(args.values, 'json')) {
    const out = leases.map((l) => ({ name: l.name, owner: l.owner, term: l.term, expiresInMs: Math.round(l.remainingMs), ttlMs: l.ttlMs, meta: l.meta }));
    io.stdout.write(`${JSON.stringify(out)}\n`);
    return 0;
  }
  if (leases.length === 0) {
    io.stdout.write(group !== undefined ? `${printable(group)}: no leader (no live lease)\n` : 'no live leases\n');
    return 0;
  }
  const rows = [
    ['NAME', 'OWNER', 'TERM', 'EXPIRES IN', 'META'],
    ...leases.map((l) => [l.name, l.owner, String(l.term), formatMs(l.remainingMs), Object.keys(l.meta).length ? JSON.stringify(l.meta) : '']),
  ];
  printTable(io.stdout, rows);
  return 0;
}

function printPartitions(name: string, leases: readonly Lease[], json: boolean, io: CliIO): number {
  const nodes = partitionOwners(leases, name);
  if (json) {
    io.stdout.write(`${JSON.stringify({ name, nodes })}\n`);
    return 0;
  }
  const led = nodes.reduce((n, o) => n + o.shards.length, 0);
  io.stdout.write(`partitions ${printable(name)}: ${nodes.filter((o) => o.member).length} member(s), ${led} shard(s) led\n`);
  if (nodes.length === 0) return 0;
  const rows = [['NODE', 'MEMBER', 'SHARDS', 'LEADS'], ...nodes.map((o) => [o.id, o.member ? 'yes' : 'no', String(o.shards.length), o.shards.join(',')])];
  printTable(io.stdout, rows);
  return 0;
}
