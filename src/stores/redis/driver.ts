/**
 * ioredis, loaded only when a Redis store is opened from a URL (it is an optional peer
 * dependency), and the few client facts the store needs: a printable address and its Lua scripts
 * with their SHA1 (for EVALSHA).
 */
import { createHash } from 'node:crypto';
import { loadDriver } from '../../core/driver.js';
import type { Cluster, Command, Redis, RedisOptions } from 'ioredis';

/** A client the store accepts: a plain, Sentinel-backed or Cluster ioredis client. */
export type RedisClient = Redis | Cluster;

/** ioredis's Command class, with which the store makes the commands it sends. */
export type CommandClass = typeof Command;
export type CommandOptions = NonNullable<ConstructorParameters<CommandClass>[2]>;

interface IoredisModule {
  new (url: string, options?: RedisOptions): Redis;
  new (options: RedisOptions): Redis;
  readonly Command: CommandClass;
}

/**
 * The ioredis module (its constructor, with `Command` on it); throws DriverMissingError naming
 * `store` when it is not installed. A store given its user's own client loads it too, for
 * `Command`: the client was made with ioredis, which is then installed (a peer dependency).
 */
export function loadIoredis(store: string): IoredisModule {
  return loadDriver<IoredisModule>('ioredis', store);
}

/**
 * Options for clients tenure creates itself. A command sent while the connection is down fails at
 * once instead of waiting in the offline queue, so a down server shows as StoreUnavailableError
 * quickly rather than as a command that runs much later. No retries at all: a script that Redis
 * ran but whose reply was lost with the connection must not be sent again on reconnect (a fenced
 * append would be applied twice); it is reported as "maybe" instead (safety rule 3).
 */
export const ownClientOptions: RedisOptions = {
  maxRetriesPerRequest: 0,
  connectTimeout: 2000,
  retryStrategy: (times: number) => Math.min(times * 50, 500),
};

/** Makes the commands a store sends on one client (see commandMaker). */
export type MakeCommand = (name: string, args: (string | number | Buffer)[]) => Command;

/**
 * How a store makes its commands for a client, as the client's own command methods would: with the
 * client's key prefix, replies decoded as UTF-8 text.
 *
 * ioredis's Command constructor copies its arguments with `Array.prototype.flat()`, which costs V8
 * about 85 ns per argument on this project's machine (0.9 µs for an acquire's ten, against 6 ns for
 * a `slice()`), the largest single cost of a call on the client. When the client has no key
 * prefix, the commands are therefore made with no arguments and given theirs afterwards, through
 * the public `args` and `stringifyArguments()`: what the constructor does, less the copy (the store
 * hands over a fresh array and never touches it again). A one-time check that such a command
 * writes the same bytes and names the same keys as one from the constructor falls back to the
 * constructor if a version of ioredis ever makes them differ; so does a client with a key prefix
 * (the constructor applies it).
 */
export function commandMaker(Command: CommandClass, keyPrefix: string | undefined): MakeCommand {
  const options: CommandOptions = { keyPrefix, replyEncoding: 'utf8' };
  if (keyPrefix || !uncopiedCommandsMatch(Command)) return (name, args) => new Command(name, args, options);
  return (name, args) => uncopiedCommand(Command, name, args, options);
}

const NO_ARGS: string[] = [];

/** A command made with no arguments and given `args` afterwards (see commandMaker). */
function uncopiedCommand(Command: CommandClass, name: string, args: (string | number | Buffer)[], options: CommandOptions): Command {
  const command = new Command(name, NO_ARGS, options);
  command.args = args;
  command.stringifyArguments();
  return command;
}

/** The verdict of uncopiedCommandsMatch for each Command class met (one per ioredis copy loaded). */
const matches = new WeakMap<CommandClass, boolean>();

/**
 * Whether commands made by uncopiedCommand write the same bytes and name the same keys as the
 * constructor's with this ioredis (checked once per Command class, on script calls with text,
 * numbers and bytes). Exported for the tests.
 */
export function uncopiedCommandsMatch(Command: CommandClass): boolean {
  let match = matches.get(Command);
  if (match === undefined) {
    match = compareCommands(Command);
    matches.set(Command, match);
  }
  return match;
}

function compareCommands(Command: CommandClass): boolean {
  const samples = (): (string | number | Buffer)[][] => [
    ['0123456789abcdef0123456789abcdef01234567', 2, '{t}:a', '{t}:b', 'x\ny é', 1500],
    ['0123456789abcdef0123456789abcdef01234567', 1, '{t}:a', Buffer.from([0xff, 0x00]), 0],
  ];
  const wire = (c: Command): string => {
    const w = c.toWritable({});
    return typeof w === 'string' ? w : w.toString('latin1');
  };
  const options: CommandOptions = { replyEncoding: 'utf8' };
  try {
    const copied = samples().map((args) => new Command('evalsha', args, options));
    const uncopied = samples().map((args) => uncopiedCommand(Command, 'evalsha', args, options));
    return copied.every((c, i) => {
      const u = uncopied[i]!;
      return wire(c) === wire(u) && JSON.stringify(c.getKeys()) === JSON.stringify(u.getKeys());
    });
  } catch {
    return false;
  }
}

/**
 * Keep a client from staying closed when ioredis ends it by itself in the middle of a connect.
 *
 * ioredis ends a client for good (status `end`: every later command fails with "Connection is
 * closed.") when its connect attempt is cut short by anything but its owner. With `failoverDetector`
 * a Sentinel client does this to itself: a `+switch-master` notice that arrives while the client
 * is asking a sentinel for the master, during a reconnect, stops the attempt, and the client never
 * tries again (seen in this project's CI after a master was killed; redis/ioredis#1683 reports the
 * same). A store on such a client would fail every call until the process restarted.
 *
 * So, for a plain or Sentinel client (a Cluster reconnects its nodes itself): when the client ends
 * straight from `connecting` and its owner did not close it (ioredis's `manuallyClosing`, set by
 * `disconnect()` and `quit()`), connect it again after 100 ms, doubling up to 2 s while attempts
 * fail. An end that follows a closed connection is ioredis obeying `retryStrategy`, and is left
 * alone. Returns a function that stops watching (the store calls it on close).
 */
export function reconnectWhenEndedMidConnect(client: RedisClient): () => void {
  if (client.isCluster) return () => {};
  const redis = client as Redis;
  // Every end ioredis reaches through a closed connection emits 'close' first; only a connect
  // attempt that fails ends the client straight from 'connecting'.
  let midConnect = redis.status === 'connecting';
  let failures = 0;
  let timer: NodeJS.Timeout | null = null;
  const onConnecting = (): void => {
    midConnect = true;
  };
  const onClose = (): void => {
    midConnect = false;
  };
  const onReady = (): void => {
    failures = 0;
  };
  const onEnd = (): void => {
    if (!midConnect || timer || (redis as unknown as { manuallyClosing?: boolean }).manuallyClosing === true) return;
    midConnect = false;
    timer = setTimeout(() => {
      timer = null;
      if (redis.status === 'end') redis.connect().catch(() => {}); // a failure ends it again, and brings us back here
    }, Math.min(100 * 2 ** failures++, 2000));
    timer.unref();
  };
  const listeners = { connecting: onConnecting, close: onClose, ready: onReady, end: onEnd };
  for (const [event, listener] of Object.entries(listeners)) redis.on(event, listener);
  return () => {
    if (timer) clearTimeout(timer);
    timer = null;
    for (const [event, listener] of Object.entries(listeners)) redis.off(event, listener);
  };
}

/** `host:port` of a client for error messages (never its password). */
export function addressOf(client: RedisClient): string {
  if (client.isCluster) {
    const nodes = (client as unknown as { startupNodes: unknown[] }).startupNodes;
    const text = nodes
      .map((n) => (typeof n === 'string' ? n : typeof n === 'number' ? `127.0.0.1:${n}` : hostPort(n as { host?: string; port?: number })))
      .join(',');
    return `cluster ${text}`;
  }
  const o = (client as Redis).options;
  if (o.sentinels && o.sentinels.length > 0) return `sentinel ${o.name ?? '?'} via ${o.sentinels.map((s) => hostPort(s)).join(',')}`;
  if (o.path) return o.path;
  return hostPort(o);
}

function hostPort(o: { host?: string | undefined; port?: number | undefined }): string {
  return `${o.host ?? 'localhost'}:${o.port ?? 6379}`;
}

/** A Lua script with its SHA1; the store runs it by EVALSHA and re-sends it by EVAL after NOSCRIPT. */
export class LuaScript {
  readonly sha: string;
  constructor(readonly name: string, readonly source: string) {
    this.sha = createHash('sha1').update(source).digest('hex');
  }
}
