/**
 * The `etcd3` npm package, loaded only when an etcd store is used (an optional peer dependency).
 */
import { createRequire } from 'node:module';
import { loadDriver } from '../../core/driver.js';
import type * as Etcd3Module from 'etcd3';

export type { Etcd3, IKeyValue, IResponseHeader, ICompare, IRequestOp, IWatchResponse, Watcher, IOptions } from 'etcd3';

const require = createRequire(import.meta.url);

let loaded: typeof Etcd3Module | null = null;

/** The etcd3 module; throws DriverMissingError when it is not installed. */
export function loadEtcd3(): typeof Etcd3Module {
  loaded ??= loadDriver<typeof Etcd3Module>('etcd3', 'etcd');
  return loaded;
}

type HostPolicy = NonNullable<NonNullable<Etcd3Module.IOptions['faultHandling']>['host']>;

interface Cockatiel {
  circuitBreaker(policy: unknown, options: { halfOpenAfter: number; breaker: unknown }): unknown;
  handleWhen(filter: (error: Error) => boolean): unknown;
  ConsecutiveBreaker: new (threshold: number) => unknown;
}

/** How long a host's breaker stays open after 3 consecutive failures before one call may try again. */
export const HOST_BREAKER_HALF_OPEN_MS = 250;

/**
 * The per-host fault policy of clients tenure makes: etcd3's own (a circuit breaker that opens
 * after 3 consecutive recoverable errors), but half-open after HOST_BREAKER_HALF_OPEN_MS instead of
 * etcd3's 5 s. Five seconds without even trying a host that came back is five seconds without a
 * leader after a store restart: the chaos suite's etcd run saw a group's first write 3 s after the
 * restart healed, all of it the breaker. The breaker is cockatiel's (etcd3's own dependency,
 * loaded from where etcd3 is).
 */
export function hostPolicy(): HostPolicy {
  const etcd3 = loadEtcd3();
  const beside = createRequire(require.resolve('etcd3'));
  const c = beside('cockatiel') as Cockatiel;
  return () => c.circuitBreaker(c.handleWhen(etcd3.isRecoverableError), { halfOpenAfter: HOST_BREAKER_HALF_OPEN_MS, breaker: new c.ConsecutiveBreaker(3) }) as ReturnType<HostPolicy>;
}
