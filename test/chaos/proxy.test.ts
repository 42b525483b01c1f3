/**
 * The fault proxy against a small echo server started here (and, when one answers on
 * 127.0.0.1:6379, a real Redis spoken to in raw RESP): each fault's effect as a client sees it.
 */
import net from 'node:net';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { FaultProxy } from './proxy/index.js';
import type { Endpoint } from './proxy/index.js';

interface EchoServer {
  readonly endpoint: Endpoint;
  /** Server-side sockets, newest last. */
  readonly sockets: net.Socket[];
  /** Bytes the server received, over all connections. */
  received(): string;
  close(): Promise<void>;
}

/** Echoes every byte back, unless `echo` is false; records what it received. */
async function startEcho(echo = true): Promise<EchoServer> {
  let text = '';
  const sockets: net.Socket[] = [];
  const server = net.createServer((s) => {
    sockets.push(s);
    s.on('error', () => {});
    s.on('data', (b: Buffer) => {
      text += b.toString();
      if (echo) s.write(b);
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const port = (server.address() as net.AddressInfo).port;
  return {
    endpoint: { host: '127.0.0.1', port },
    sockets,
    received: () => text,
    close: () =>
      new Promise<void>((r) => {
        for (const s of sockets) s.destroy();
        server.close(() => r());
      }),
  };
}

/** A client that collects what it reads and notes whether and how it closed. */
interface Client {
  readonly socket: net.Socket;
  data(): string;
  readonly state: { closed: boolean; error: string | null };
}

function connect(endpoint: Endpoint): Promise<Client> {
  return new Promise((resolve, reject) => {
    let text = '';
    const state = { closed: false, error: null as string | null };
    const socket = net.connect(endpoint.port, endpoint.host);
    socket.on('data', (b: Buffer) => (text += b.toString()));
    socket.on('close', () => (state.closed = true));
    socket.once('error', (err: NodeJS.ErrnoException) => {
      state.error = err.code ?? err.message;
      reject(err);
    });
    socket.once('connect', () => resolve({ socket, data: () => text, state }));
  });
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

async function waitFor(what: string, cond: () => boolean, ms = 2000): Promise<void> {
  const until = performance.now() + ms;
  while (!cond()) {
    if (performance.now() > until) throw new Error(`timed out waiting for ${what}`);
    await sleep(5);
  }
}

/** Time from write to the whole echo arriving, ms. */
async function roundTrip(c: Client, text: string): Promise<number> {
  const before = c.data().length;
  const t0 = performance.now();
  c.socket.write(text);
  await waitFor(`echo of ${text}`, () => c.data().length >= before + text.length, 5000);
  return performance.now() - t0;
}

describe('FaultProxy', () => {
  let echo: EchoServer;
  let proxy: FaultProxy;
  const clients: Client[] = [];
  const open = async (): Promise<Client> => {
    const c = await connect(proxy.endpoint);
    clients.push(c);
    return c;
  };

  beforeEach(async () => {
    echo = await startEcho();
    proxy = await FaultProxy.start({ target: echo.endpoint });
  });

  afterEach(async () => {
    for (const c of clients.splice(0)) c.socket.destroy();
    await proxy.close();
    await echo.close();
  });

  it('forwards both ways when healthy', async () => {
    const c = await open();
    await roundTrip(c, 'hello');
    expect(c.data()).toBe('hello');
    expect(echo.received()).toBe('hello');
    expect(proxy.getStats()).toMatchObject({ mode: 'pass', open: 1, accepted: 1, bytesUp: 5, bytesDown: 5 });
  });

  it('delay adds latency per direction and heals', async () => {
    const c = await open();
    expect(await roundTrip(c, 'a')).toBeLessThan(100);
    await proxy.delay(150);
    const both = await roundTrip(c, 'b');
    expect(both).toBeGreaterThanOrEqual(290);
    await proxy.heal();
    await proxy.delay(150, 'up');
    const up = await roundTrip(c, 'c');
    expect(up).toBeGreaterThanOrEqual(140);
    expect(up).toBeLessThan(290);
    await proxy.delay(0, 'up');
    await proxy.delay(150, 'down');
    // The server sees the bytes at once; only the answer is late.
    const t0 = performance.now();
    c.socket.write('d');
    await waitFor('server got d', () => echo.received().endsWith('d'));
    expect(performance.now() - t0).toBeLessThan(100);
    await waitFor('echo of d', () => c.data().endsWith('d'));
    expect(performance.now() - t0).toBeGreaterThanOrEqual(140);
    await proxy.heal();
    expect(await roundTrip(c, 'e')).toBeLessThan(100);
    expect(c.data()).toBe('abcde');
  });

  it('delay keeps the order of chunks', async () => {
    const c = await open();
    await proxy.delay(30);
    for (let i = 0; i < 50; i++) c.socket.write(`${i},`);
    const want = Array.from({ length: 50 }, (_, i) => `${i},`).join('');
    await waitFor('all echoes', () => c.data().length >= want.length, 5000);
    expect(c.data()).toBe(want);
  });

  it('drop resets current connections and accepts new ones', async () => {
    const a = await open();
    const b = await open();
    await roundTrip(a, 'x');
    expect(await proxy.drop()).toBe(2);
    await waitFor('a closed', () => a.state.closed);
    await waitFor('b closed', () => b.state.closed);
    const c = await open();
    await roundTrip(c, 'y');
    expect(c.data()).toBe('y');
    expect(proxy.getStats().dropped).toBe(2);
  });

  it('tear delivers the first bytes of the next chunk down, then closes; new connections pass whole', async () => {
    const c = await open();
    await roundTrip(c, 'ab');
    expect(await proxy.tear(3)).toBe(1);
    c.socket.write('0123456789');
    await waitFor('c closed', () => c.state.closed);
    expect(c.data()).toBe('ab012'); // the server got the whole chunk; the client half of its echo
    expect(echo.received()).toBe('ab0123456789');
    const d = await open();
    await roundTrip(d, 'whole');
    expect(d.data()).toBe('whole');
  });

  it('tear up: the server gets the part, never the rest; at least one byte is always kept back', async () => {
    const c = await open();
    await roundTrip(c, 'x');
    await proxy.tear(100, 'up');
    c.socket.write('abc');
    await waitFor('c closed', () => c.state.closed);
    await sleep(50);
    expect(echo.received()).toBe('xab');
    await expect(proxy.tear(-1)).rejects.toThrow(RangeError);
    await expect(proxy.tear(1.5)).rejects.toThrow(RangeError);
  });

  it('cut closes current connections and refuses new ones until heal, on the same port', async () => {
    const a = await open();
    await roundTrip(a, 'x');
    const port = proxy.endpoint.port;
    await proxy.cut();
    await waitFor('a closed', () => a.state.closed);
    await expect(connect(proxy.endpoint)).rejects.toMatchObject({ code: 'ECONNREFUSED' });
    await proxy.heal();
    expect(proxy.endpoint.port).toBe(port);
    const c = await open();
    await roundTrip(c, 'z');
    expect(echo.received()).toBe('xz');
  });

  it('blackhole accepts, never answers, never closes, and delivers the held bytes at heal', async () => {
    const a = await open();
    await roundTrip(a, '1');
    await proxy.blackhole();
    a.socket.write('2');
    const b = await open(); // a new connection is accepted too
    b.socket.write('3');
    await sleep(400);
    expect(a.data()).toBe('1');
    expect(b.data()).toBe('');
    expect(echo.received()).toBe('1');
    expect(a.state.closed || b.state.closed).toBe(false);
    await proxy.heal();
    await waitFor('held bytes echoed', () => a.data() === '12' && b.data() === '3');
    expect(echo.received()).toContain('2');
    expect(echo.received()).toContain('3');
  });

  it('blackhole never closes the client even when the server hangs up; the close comes at heal', async () => {
    const a = await open();
    await roundTrip(a, 'q');
    await proxy.blackhole();
    await waitFor('server socket', () => echo.sockets.length === 1);
    echo.sockets[0]!.destroy();
    await sleep(300);
    expect(a.state.closed).toBe(false);
    await proxy.heal();
    await waitFor('a closed after heal', () => a.state.closed);
  });

  it('blackhole with discard throws the bytes away', async () => {
    const a = await open();
    await proxy.blackhole({ discard: true });
    a.socket.write('lost');
    await sleep(200);
    await proxy.heal();
    await roundTrip(a, 'kept');
    expect(a.data()).toBe('kept');
    expect(echo.received()).toBe('kept');
  });

  it('oneWay up: the server hears the client, the client hears nothing until heal', async () => {
    const a = await open();
    await proxy.oneWay('up');
    a.socket.write('ping');
    await waitFor('server got ping', () => echo.received() === 'ping');
    await sleep(250);
    expect(a.data()).toBe('');
    await proxy.heal();
    await waitFor('echo after heal', () => a.data() === 'ping');
  });

  it('oneWay down: the client hears the server, the server hears nothing until heal', async () => {
    const a = await open();
    await roundTrip(a, 'hi');
    await proxy.oneWay('down');
    a.socket.write('up-lost');
    await waitFor('server socket', () => echo.sockets.length === 1);
    echo.sockets[0]!.write('push');
    await waitFor('client got push', () => a.data() === 'hipush');
    await sleep(200);
    expect(echo.received()).toBe('hi');
    await proxy.heal();
    await waitFor('server got the held bytes', () => echo.received() === 'hiup-lost');
  });

  it('a refused target closes the client connection', async () => {
    const dead = await startEcho();
    const port = dead.endpoint.port;
    await dead.close();
    const p = await FaultProxy.start({ target: { host: '127.0.0.1', port } });
    try {
      const c = await connect(p.endpoint);
      await waitFor('closed', () => c.state.closed);
    } finally {
      await p.close();
    }
  });
});

/** True when something answers RESP PING on 127.0.0.1:6379. */
async function redisAvailable(): Promise<boolean> {
  try {
    const c = await connect({ host: '127.0.0.1', port: 6379 });
    c.socket.write('PING\r\n');
    await waitFor('PONG', () => c.data().includes('PONG'), 500);
    c.socket.destroy();
    return true;
  } catch {
    return false;
  }
}

const haveRedis = await redisAvailable();

describe.skipIf(!haveRedis)('FaultProxy in front of the local Redis (raw RESP)', () => {
  it('PING passes, blackholes, is cut, and passes again after heal', async () => {
    const proxy = await FaultProxy.start({ target: { host: '127.0.0.1', port: 6379 } });
    try {
      const c = await connect(proxy.endpoint);
      c.socket.write('*1\r\n$4\r\nPING\r\n');
      await waitFor('+PONG', () => c.data() === '+PONG\r\n');
      await proxy.blackhole();
      c.socket.write('*1\r\n$4\r\nPING\r\n');
      await sleep(300);
      expect(c.data()).toBe('+PONG\r\n');
      expect(c.state.closed).toBe(false);
      await proxy.heal();
      await waitFor('held PING answered', () => c.data() === '+PONG\r\n+PONG\r\n');
      await proxy.delay(100);
      const t0 = performance.now();
      c.socket.write('*1\r\n$4\r\nPING\r\n');
      await waitFor('slow PONG', () => c.data().length === 21);
      expect(performance.now() - t0).toBeGreaterThanOrEqual(190);
      await proxy.cut();
      await waitFor('closed by cut', () => c.state.closed);
      await expect(connect(proxy.endpoint)).rejects.toMatchObject({ code: 'ECONNREFUSED' });
      await proxy.heal();
      const d = await connect(proxy.endpoint);
      d.socket.write('*1\r\n$4\r\nPING\r\n');
      await waitFor('+PONG after heal', () => d.data() === '+PONG\r\n');
      d.socket.destroy();
    } finally {
      await proxy.close();
    }
  });
});
