/**
 * A TCP fault proxy for the chaos suite: it listens on a local port and forwards every accepted
 * connection to one target over its own upstream connection, and lets a test or the nemesis break
 * that path on purpose.
 *
 * Directions: `up` is client -> target, `down` is target -> client, `both` is both.
 *
 * Faults (each replaces the previous mode; `heal()` restores plain forwarding):
 *  - `delay(ms, direction)`: every chunk in that direction is held `ms` before it is written
 *    (order kept). Combines with the modes below.
 *  - `drop()`: reset every current connection; new connections are still accepted.
 *  - `cut()`: reset every current connection and refuse new ones (the listener closes, so a
 *    client gets ECONNREFUSED) until `heal()` listens again on the same port.
 *  - `blackhole()`: current and new connections stay open but nothing is forwarded either way,
 *    and nothing is closed (not even when one side hangs up). By default the bytes are held and
 *    delivered at `heal()`, as TCP delivers after a partition heals; `{ discard: true }` throws
 *    them away instead.
 *  - `oneWay(direction)`: forward only `direction`; the other one is held (or discarded) as in a
 *    blackhole.
 *  - `tear(keepBytes, direction)`: a torn write. On every current connection the next chunk in
 *    `direction` is cut after `keepBytes` bytes, that part is delivered and the connection is then
 *    closed, as when a peer dies in the middle of a write: the receiver holds half a message. It
 *    does not change the mode.
 */
import net from 'node:net';

export type Direction = 'up' | 'down' | 'both';
export type ProxyMode = 'pass' | 'cut' | 'blackhole' | 'one-way';

export interface Endpoint {
  readonly host: string;
  readonly port: number;
}

export interface FaultProxyOptions {
  /** Where connections are forwarded. */
  readonly target: Endpoint;
  /** Listen address (default 127.0.0.1) and port (default 0: any free port). */
  readonly host?: string;
  readonly port?: number;
  /** For messages and stats. */
  readonly name?: string;
}

export interface HoldOptions {
  /** Throw the blocked bytes away instead of delivering them at heal(). */
  readonly discard?: boolean;
}

export interface ProxyStats {
  readonly mode: ProxyMode;
  /** Connections open now. */
  readonly open: number;
  /** Connections accepted since start. */
  readonly accepted: number;
  /** Connections reset by drop() or cut(). */
  readonly dropped: number;
  readonly bytesUp: number;
  readonly bytesDown: number;
}

type Flow = 'flow' | 'hold' | 'discard';

/** One direction of one connection: reads `src`, writes `dst`, with delay and hold. */
class Pipe {
  private readonly queue: { chunk: Buffer; due: number }[] = [];
  private timer: NodeJS.Timeout | null = null;
  private flow: Flow = 'flow';
  private delayMs = 0;
  private waitingDrain = false;
  private srcEnded = false;
  private dstEnded = false;
  /** Armed by tear(): deliver this many bytes of the next chunk, then close. */
  private tearAfter: number | null = null;
  private onTorn: (() => void) | null = null;

  constructor(
    private readonly src: net.Socket,
    private readonly dst: net.Socket,
    private readonly count: (n: number) => void,
    private readonly onEnd: () => void,
  ) {
    src.on('data', (chunk: Buffer) => this.push(chunk));
    src.on('end', () => {
      this.srcEnded = true;
      this.pump();
    });
    dst.on('drain', () => {
      this.waitingDrain = false;
      this.pump();
    });
  }

  get ended(): boolean {
    return this.dstEnded;
  }

  setFlow(flow: Flow): void {
    this.flow = flow;
    if (flow === 'discard') this.queue.length = 0;
    this.pump();
  }

  setDelay(ms: number): void {
    this.delayMs = Math.max(0, ms);
    this.pump();
  }

  /** Cut the next chunk after `keepBytes` bytes, deliver that part, then call `torn`. */
  tear(keepBytes: number, torn: () => void): void {
    this.tearAfter = keepBytes;
    this.onTorn = torn;
    this.pump();
  }

  private push(chunk: Buffer): void {
    if (this.flow === 'discard') return;
    this.queue.push({ chunk, due: performance.now() + this.delayMs });
    this.pump();
  }

  /** Write whatever is due, keep reading only while the path is open and `dst` keeps up. */
  private pump(): void {
    if (this.timer) {
      clearTimeout(this.timer);
      this.timer = null;
    }
    if (this.dst.destroyed) return;
    if (this.flow === 'flow') {
      const now = performance.now();
      while (this.queue.length > 0 && !this.waitingDrain) {
        const head = this.queue[0]!;
        if (head.due > now) {
          this.timer = setTimeout(() => this.pump(), Math.ceil(head.due - now));
          break;
        }
        this.queue.shift();
        if (this.tearAfter !== null) {
          // At least one byte is kept back, so the receiver never gets the whole chunk.
          const part = head.chunk.subarray(0, Math.max(0, Math.min(this.tearAfter, head.chunk.length - 1)));
          const torn = this.onTorn;
          this.tearAfter = null;
          this.onTorn = null;
          this.queue.length = 0;
          this.count(part.length);
          this.dstEnded = true;
          this.dst.end(part, () => torn?.());
          return;
        }
        this.count(head.chunk.length);
        if (!this.dst.write(head.chunk)) this.waitingDrain = true;
      }
      if (this.srcEnded && this.queue.length === 0 && !this.dstEnded) {
        this.dstEnded = true;
        this.dst.end();
        this.onEnd();
      }
    }
    // Read on only while forwarding (or discarding) without backpressure; a held direction
    // stops reading so the bytes wait in the kernel as they would behind a partition.
    const read = this.flow === 'discard' || (this.flow === 'flow' && !this.waitingDrain && this.queue.length < 64);
    if (read) this.src.resume();
    else this.src.pause();
  }

  dispose(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    this.queue.length = 0;
  }
}

class Connection {
  readonly up: Pipe;
  readonly down: Pipe;
  private closed = false;
  /** A close seen while the path was blackholed, applied at heal(). */
  private closePending = false;

  constructor(
    readonly client: net.Socket,
    readonly server: net.Socket,
    private readonly proxy: FaultProxy,
    counters: { up: (n: number) => void; down: (n: number) => void },
  ) {
    const finish = (): void => {
      if (this.up.ended && this.down.ended) this.destroy();
    };
    this.up = new Pipe(client, server, counters.up, finish);
    this.down = new Pipe(server, client, counters.down, finish);
    const onClose = (): void => {
      if (this.proxy.mode === 'blackhole') this.closePending = true; // never close while blackholed
      else this.destroy();
    };
    client.on('close', onClose);
    server.on('close', onClose);
    client.on('error', () => {});
    server.on('error', () => {});
  }

  apply(flowUp: Flow, flowDown: Flow, delayUp: number, delayDown: number): void {
    if (this.closePending && this.proxy.mode !== 'blackhole') {
      this.destroy();
      return;
    }
    this.up.setDelay(delayUp);
    this.down.setDelay(delayDown);
    this.up.setFlow(flowUp);
    this.down.setFlow(flowDown);
  }

  /** Tear the next chunk in `direction` (see FaultProxy.tear), then close both sides. */
  tear(direction: 'up' | 'down', keepBytes: number): void {
    if (this.closed) return;
    (direction === 'up' ? this.up : this.down).tear(keepBytes, () => this.destroy());
  }

  /** Abrupt end of both sides (RST where the platform allows). */
  reset(): void {
    if (this.closed) return;
    this.closed = true;
    this.up.dispose();
    this.down.dispose();
    for (const s of [this.client, this.server]) {
      if (s.destroyed) continue;
      if (typeof s.resetAndDestroy === 'function' && s.readyState === 'open') s.resetAndDestroy();
      else s.destroy();
    }
    this.proxy.forget(this);
  }

  destroy(): void {
    if (this.closed) return;
    this.closed = true;
    this.up.dispose();
    this.down.dispose();
    this.client.destroy();
    this.server.destroy();
    this.proxy.forget(this);
  }
}

export class FaultProxy {
  readonly name: string;
  readonly target: Endpoint;
  private readonly host: string;
  private port: number;
  private server: net.Server | null = null;
  private readonly connections = new Set<Connection>();
  private currentMode: ProxyMode = 'pass';
  private forwardOnly: 'up' | 'down' = 'up';
  private discard = false;
  private delayUp = 0;
  private delayDown = 0;
  private closed = false;
  private stats = { accepted: 0, dropped: 0, bytesUp: 0, bytesDown: 0 };

  private constructor(options: FaultProxyOptions) {
    this.target = options.target;
    this.host = options.host ?? '127.0.0.1';
    this.port = options.port ?? 0;
    this.name = options.name ?? `proxy->${options.target.host}:${options.target.port}`;
  }

  /** Start a proxy listening on a local port (any free one by default). */
  static async start(options: FaultProxyOptions): Promise<FaultProxy> {
    const proxy = new FaultProxy(options);
    await proxy.listen();
    return proxy;
  }

  /** The address clients connect to. */
  get endpoint(): Endpoint {
    return { host: this.host, port: this.port };
  }

  get mode(): ProxyMode {
    return this.currentMode;
  }

  getStats(): ProxyStats {
    return { mode: this.currentMode, open: this.connections.size, ...this.stats };
  }

  /** Add `ms` of latency to every chunk in `direction` (0 removes it); other faults stay. */
  async delay(ms: number, direction: Direction = 'both'): Promise<void> {
    if (!Number.isFinite(ms) || ms < 0) throw new RangeError(`delay: expected ms >= 0, got ${ms}`);
    if (direction !== 'down') this.delayUp = ms;
    if (direction !== 'up') this.delayDown = ms;
    this.applyAll();
  }

  /** Reset every current connection; new ones are accepted as usual. Returns how many. */
  async drop(): Promise<number> {
    const n = this.connections.size;
    for (const c of [...this.connections]) c.reset();
    this.stats.dropped += n;
    return n;
  }

  /**
   * A torn write on every current connection: the next chunk in `direction` is cut after
   * `keepBytes` bytes (and always before its last byte), that part is delivered, and the
   * connection is closed. New connections are not affected. Returns how many were armed.
   */
  async tear(keepBytes: number, direction: 'up' | 'down' = 'down'): Promise<number> {
    if (!Number.isInteger(keepBytes) || keepBytes < 0) throw new RangeError(`tear: expected keepBytes >= 0, got ${keepBytes}`);
    const n = this.connections.size;
    for (const c of [...this.connections]) c.tear(direction, keepBytes);
    return n;
  }

  /** Reset every current connection and refuse new ones until heal(). */
  async cut(): Promise<void> {
    this.currentMode = 'cut';
    await this.stopListening();
    await this.drop();
  }

  /** Accept, never answer, never close: nothing passes either way until heal(). */
  async blackhole(options: HoldOptions = {}): Promise<void> {
    await this.ensureListening();
    this.currentMode = 'blackhole';
    this.discard = options.discard ?? false;
    this.applyAll();
  }

  /** Forward only `direction` ('up': client -> target, 'down': target -> client). */
  async oneWay(direction: 'up' | 'down', options: HoldOptions = {}): Promise<void> {
    await this.ensureListening();
    this.currentMode = 'one-way';
    this.forwardOnly = direction;
    this.discard = options.discard ?? false;
    this.applyAll();
  }

  /** Back to plain forwarding: no delay, listening, held bytes delivered. */
  async heal(): Promise<void> {
    this.currentMode = 'pass';
    this.delayUp = 0;
    this.delayDown = 0;
    this.discard = false;
    await this.ensureListening();
    this.applyAll();
  }

  /** Stop listening and reset every connection. */
  async close(): Promise<void> {
    this.closed = true;
    await this.stopListening();
    for (const c of [...this.connections]) c.destroy();
  }

  /** @internal */
  forget(c: Connection): void {
    this.connections.delete(c);
  }

  private flows(): { up: Flow; down: Flow } {
    const blocked: Flow = this.discard ? 'discard' : 'hold';
    switch (this.currentMode) {
      case 'blackhole':
        return { up: blocked, down: blocked };
      case 'one-way':
        return this.forwardOnly === 'up' ? { up: 'flow', down: blocked } : { up: blocked, down: 'flow' };
      default:
        return { up: 'flow', down: 'flow' };
    }
  }

  private applyAll(): void {
    const f = this.flows();
    for (const c of [...this.connections]) c.apply(f.up, f.down, this.delayUp, this.delayDown);
  }

  private accept(client: net.Socket): void {
    if (this.currentMode === 'cut' || this.closed) {
      client.destroy();
      return;
    }
    this.stats.accepted++;
    client.setNoDelay(true);
    const server = net.connect({ host: this.target.host, port: this.target.port, allowHalfOpen: true });
    server.setNoDelay(true);
    const c = new Connection(client, server, this, {
      up: (n) => (this.stats.bytesUp += n),
      down: (n) => (this.stats.bytesDown += n),
    });
    this.connections.add(c);
    const f = this.flows();
    c.apply(f.up, f.down, this.delayUp, this.delayDown);
  }

  private listen(): Promise<void> {
    return new Promise((resolve, reject) => {
      const server = net.createServer({ allowHalfOpen: true, pauseOnConnect: true }, (socket) => this.accept(socket));
      const onError = (err: Error): void => reject(err);
      server.once('error', onError);
      server.listen({ host: this.host, port: this.port, exclusive: true }, () => {
        server.off('error', onError);
        server.on('error', () => {});
        const addr = server.address();
        if (addr && typeof addr === 'object') this.port = addr.port;
        this.server = server;
        resolve();
      });
    });
  }

  private async ensureListening(): Promise<void> {
    if (!this.server && !this.closed) await this.listen();
  }

  private stopListening(): Promise<void> {
    const server = this.server;
    this.server = null;
    if (!server) return Promise.resolve();
    // close() stops accepting at once; its callback waits for connections, which drop() ends.
    return new Promise((resolve) => {
      server.close(() => resolve());
      setImmediate(resolve);
    });
  }
}
