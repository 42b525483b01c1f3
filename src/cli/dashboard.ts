/**
 * `tenure dashboard`: serve the live dashboard (src/observe/dashboard.ts) on a local HTTP server
 * until interrupted. Loopback by default; any other address needs a token.
 */
import { createServer } from 'node:http';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { isIP } from 'node:net';
import { InvalidArgumentError, checkName } from '../core/index.js';
import { checkDashboardToken, dashboardHandler } from '../observe/index.js';
import { durationOption, parseCommand, renderHelp, stringOption } from './args.js';
import type { CommandSpec } from './args.js';
import type { CliIO } from './output.js';
import { onTermination } from './signals.js';
import { STORE_OPTION, StoreOpenError, openCliStore, storeTarget } from './store.js';

export const dashboardSpec: CommandSpec = {
  name: 'dashboard',
  usage: 'dashboard [--store URL] [--listen 127.0.0.1:8080] [--token T] [--groups a,b | --prefix P] [--poll MS]',
  summary: 'Serve a live web page of every group: leader, term, time left, term changes, stream heads, follower lag.',
  description: [
    'Binds to loopback by default. Any other address needs a token (--token, or better\n$TENURE_DASHBOARD_TOKEN, which other users cannot read in the process list): requests\nwithout it are refused with 401. Open the page as http://HOST:PORT/?token=T.',
    'The page updates live (server-sent events); one poll loop serves every viewer, and\nchanges of leader come from the store\'s push where it has one. Stop with Ctrl-C.',
  ],
  options: {
    store: STORE_OPTION,
    listen: { type: 'string', value: 'HOST:PORT', help: 'address to serve on (default 127.0.0.1:8080; port 0 picks a free one)' },
    token: { type: 'string', value: 'T', help: 'require this token (8..1024 printable characters; default $TENURE_DASHBOARD_TOKEN)' },
    groups: { type: 'string', value: 'a,b', help: 'only these groups' },
    prefix: { type: 'string', value: 'P', help: 'only groups whose name starts with P' },
    poll: { type: 'string', value: 'MS', help: 'poll interval (default 1s, 2s where the store pushes changes)' },
  },
  examples: ['tenure dashboard', 'TENURE_DASHBOARD_TOKEN=$(openssl rand -hex 16) tenure dashboard --listen 0.0.0.0:8080 --store postgres://db/app'],
};

/** A parsed --listen: host (IPv6 without brackets) and port. */
export interface ListenAddress {
  readonly host: string;
  readonly port: number;
}

const DEFAULT_LISTEN = '127.0.0.1:8080';
const HOSTNAME = /^(?=.{1,253}$)[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*$/i;

/** Parse `HOST:PORT` or `[IPV6]:PORT`. Throws InvalidArgumentError naming --listen. */
export function parseListen(text: string): ListenAddress {
  const m = /^\[([0-9a-f:.]+)\]:(\d{1,5})$/i.exec(text) ?? /^([^:[\]]+):(\d{1,5})$/.exec(text);
  if (!m) throw new InvalidArgumentError('--listen', `expected HOST:PORT or [IPV6]:PORT, got '${text}'`);
  const host = m[1]!;
  const port = Number(m[2]);
  if (port > 65535) throw new InvalidArgumentError('--listen', `port must be in [0, 65535], got ${port}`);
  if (text.startsWith('[') ? isIP(host) !== 6 : isIP(host) !== 4 && !HOSTNAME.test(host)) {
    throw new InvalidArgumentError('--listen', `'${host}' is not an IP address or host name`);
  }
  return { host, port };
}

/** Loopback addresses: 127.0.0.0/8, ::1, localhost. */
export function isLoopback(host: string): boolean {
  const h = host.toLowerCase();
  return h === 'localhost' || h === '::1' || (isIP(h) === 4 && h.startsWith('127.'));
}

export async function dashboardCommand(argv: readonly string[], io: CliIO): Promise<number> {
  const args = parseCommand(dashboardSpec, argv);
  if (args.help) {
    io.stdout.write(renderHelp(dashboardSpec));
    return 0;
  }
  const listen = parseListen(stringOption(args.values, 'listen') ?? DEFAULT_LISTEN);
  const tokenFlag = stringOption(args.values, 'token');
  const tokenEnv = io.env.TENURE_DASHBOARD_TOKEN;
  const token =
    tokenFlag !== undefined ? checkDashboardToken('--token', tokenFlag) : tokenEnv !== undefined && tokenEnv !== '' ? checkDashboardToken('TENURE_DASHBOARD_TOKEN', tokenEnv) : undefined;
  if (!isLoopback(listen.host) && token === undefined) {
    throw new InvalidArgumentError('--listen', `${listen.host} is not a loopback address: give --token (or TENURE_DASHBOARD_TOKEN) so that only holders of the token see the dashboard`);
  }
  const groupsText = stringOption(args.values, 'groups');
  const prefixText = stringOption(args.values, 'prefix');
  if (groupsText !== undefined && prefixText !== undefined) throw new InvalidArgumentError('--groups', 'give --groups or --prefix, not both');
  const groups = groupsText === undefined ? undefined : [...new Set(groupsText.split(',').map((g) => checkName('--groups', g.trim())))];
  const prefix = prefixText === undefined ? undefined : checkName('--prefix', prefixText);
  const pollMs = args.values.poll === undefined ? undefined : durationOption(args.values, 'poll', 1000, 100, 60_000);
  const target = storeTarget(stringOption(args.values, 'store'), io.env);
  // Read-only: a mistyped SQLite path is an error, never a new database.
  const store = await openCliStore(target, undefined, true);
  let dashboard;
  try {
    dashboard = dashboardHandler({
      store,
      storeUrl: target.url,
      ...(token !== undefined ? { token } : {}),
      ...(groups !== undefined ? { groups } : {}),
      ...(prefix !== undefined ? { prefix } : {}),
      ...(pollMs !== undefined ? { pollMs } : {}),
    });
  } catch (err) {
    await store.close();
    throw err;
  }
  const handler = dashboard;
  // Without a token the page is protected only by being on loopback; a page on another site
  // whose name resolves to 127.0.0.1 (DNS rebinding) must not read it: only loopback Host names.
  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    if (token === undefined && !isLoopback(hostOf(req.headers.host))) {
      res.statusCode = 403;
      res.setHeader('Content-Type', 'text/plain; charset=utf-8');
      res.end('forbidden: this dashboard answers only to a loopback host name (use --token to serve other names)\n');
      return;
    }
    handler(req, res);
  });
  server.keepAliveTimeout = 5000;
  const closeAll = async (): Promise<void> => {
    await handler.close();
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
    await store.close();
  };
  try {
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(listen.port, listen.host, () => {
        server.off('error', reject);
        resolve();
      });
    });
  } catch (err) {
    await handler.close();
    await store.close();
    const e = err as NodeJS.ErrnoException;
    throw new StoreOpenError(`cannot listen on ${listen.host}:${listen.port}: ${e.code === 'EADDRINUSE' ? 'address in use' : e.code === 'EACCES' ? 'permission denied' : e.code === 'EADDRNOTAVAIL' ? 'no such address on this machine' : e.message}`);
  }
  const address = server.address();
  const port = typeof address === 'object' && address !== null ? address.port : listen.port;
  const shownHost = listen.host.includes(':') ? `[${listen.host}]` : listen.host;
  io.stdout.write(`tenure dashboard: serving http://${shownHost}:${port}/ for ${target.display}${token !== undefined ? ' (token required)' : ''}\n`);
  await new Promise<void>((resolve) => {
    const remove = onTermination({
      stop: () => {
        remove();
        resolve();
      },
    });
  });
  await closeAll();
  return 0;
}

function hostOf(header: string | undefined): string {
  if (header === undefined) return '';
  const m = /^\[([^\]]*)\](?::\d+)?$/.exec(header) ?? /^([^:]*)(?::\d+)?$/.exec(header);
  return m ? m[1]! : '';
}
