/**
 * Apache Curator and tenure on the same path: a Curator LeaderLatch (Debian's libcurator-recipes-java,
 * test/fixtures/curator/LatchHolder.java, compiled here) on `CHROOT/leases/G` and a tenure lease
 * named G on `zk://…/CHROOT` see one leader, whichever came first. Skipped, saying why, when
 * Curator's jars or javac are not on the machine.
 */
import { spawn, execFileSync } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ZookeeperStore } from '../../src/stores/zookeeper/index.js';
import { startZookeeper } from '../fixtures/zookeeper.js';
import type { ZookeeperServer } from '../fixtures/zookeeper.js';

const SOURCE = fileURLToPath(new URL('../fixtures/curator/LatchHolder.java', import.meta.url));
const haveCurator = existsSync('/usr/share/java') && readdirSync('/usr/share/java').some((f) => f.startsWith('curator-recipes'));
const haveJavac = (() => {
  try {
    execFileSync('javac', ['-version'], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
})();
const why = !haveCurator ? ' [skipped: no Curator jars (apt-get install libcurator-recipes-java)]' : !haveJavac ? ' [skipped: no javac]' : '';

class Latch {
  readonly lines: string[] = [];
  private readonly p: ChildProcess;
  constructor(classes: string, connect: string, path: string, id: string) {
    this.p = spawn('java', ['-cp', `/usr/share/java/*:${classes}`, 'LatchHolder', connect, path, id], { stdio: ['pipe', 'pipe', 'ignore'] });
    let buf = '';
    this.p.stdout!.on('data', (d: Buffer) => {
      buf += d.toString();
      const parts = buf.split('\n');
      buf = parts.pop()!;
      this.lines.push(...parts.map((l) => l.trim()).filter((l) => l !== ''));
    });
  }
  async waitFor(line: string, timeoutMs = 20_000): Promise<void> {
    const start = Date.now();
    while (!this.lines.includes(line)) {
      if (Date.now() - start > timeoutMs) throw new Error(`latch did not say ${line}: ${this.lines.join(',')}`);
      await new Promise((r) => setTimeout(r, 20));
    }
  }
  /** Ask the latch whether it has leadership now. */
  async has(): Promise<boolean> {
    const before = this.lines.length;
    this.p.stdin!.write('ask\n');
    const start = Date.now();
    for (;;) {
      const answer = this.lines.slice(before).find((l) => l === 'has-leadership' || l === 'no-leadership');
      if (answer) return answer === 'has-leadership';
      if (Date.now() - start > 10_000) throw new Error('latch did not answer');
      await new Promise((r) => setTimeout(r, 10));
    }
  }
  async close(): Promise<void> {
    this.p.stdin!.write('close\n');
    await this.waitFor('closed');
  }
  kill(): void {
    this.p.kill('SIGKILL');
  }
}

describe.skipIf(why !== '')(`Curator LeaderLatch and tenure on one path${why}`, () => {
  let server: ZookeeperServer;
  let classes: string;
  const latches: Latch[] = [];
  const stores: ZookeeperStore[] = [];
  beforeAll(async () => {
    classes = mkdtempSync(join(tmpdir(), 'tenure-curator-'));
    execFileSync('javac', ['-cp', '/usr/share/java/*', '-d', classes, SOURCE]);
    server = await startZookeeper();
  });
  afterAll(async () => {
    for (const l of latches) l.kill();
    for (const s of stores) await s.close();
    await server.stop();
    rmSync(classes, { recursive: true, force: true });
  });

  function setup(): { store: ZookeeperStore; latch: () => Latch } {
    const chroot = `/curator-${randomBytes(4).toString('hex')}`;
    const store = new ZookeeperStore({ hosts: [server.host], chroot });
    stores.push(store);
    return {
      store,
      latch: () => {
        const l = new Latch(classes, server.host, store.layout.lease('jobs'), 'java-node');
        latches.push(l);
        return l;
      },
    };
  }

  it('a Curator leader first: tenure reports it as the holder and does not lead until the latch closes', { timeout: 60_000 }, async () => {
    const { store, latch } = setup();
    const l = latch();
    await l.waitFor('leader');
    const r = await store.acquire('jobs', 'tenure~1', 500);
    expect(r.acquired).toBe(false);
    expect(r.lease.owner).toBe('zookeeper:java-node');
    expect(await l.has()).toBe(true);
    await l.close();
    const start = Date.now();
    for (;;) {
      if ((await store.acquire('jobs', 'tenure~1', 500)).acquired) break;
      expect(Date.now() - start).toBeLessThan(10_000);
      await new Promise((res) => setTimeout(res, 50));
    }
    expect(await store.read('jobs')).toMatchObject({ owner: 'tenure~1' });
  });

  it('tenure first: the Curator latch waits behind tenure\'s node and leads once tenure releases', { timeout: 60_000 }, async () => {
    const { store, latch } = setup();
    const held = await store.acquire('jobs', 'tenure~1', 5000);
    expect(held.acquired).toBe(true);
    const l = latch();
    await l.waitFor('started');
    await new Promise((res) => setTimeout(res, 500));
    expect(await l.has()).toBe(false);
    expect(l.lines).not.toContain('leader');
    expect(await store.release('jobs', 'tenure~1', held.lease.term)).toBe(true);
    await l.waitFor('leader');
    expect(await l.has()).toBe(true);
    expect((await store.acquire('jobs', 'other~1', 5000)).acquired).toBe(false);
  });
});
