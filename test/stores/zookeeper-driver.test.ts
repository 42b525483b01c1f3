/**
 * node-zookeeper-client 1.1 knows ZooKeeper 3.4's error codes only; a later server's code (sent
 * after a restart) made it throw inside its socket handler and end the process (chaos suite).
 * tenure's loader makes such a code a failed request instead.
 */
import { describe, expect, it } from 'vitest';
import { exactVersion, loadZookeeper } from '../../src/stores/zookeeper/driver.js';

interface Factory {
  create(code: number, path?: string): Error & { code: number };
  NO_NODE: number;
}

describe('the ZooKeeper driver as tenure loads it', () => {
  const { Exception } = loadZookeeper() as unknown as { Exception: Factory };

  it('makes an error code the driver does not know (3.5+: SESSION_MOVED -118, THROTTLED -127) an exception, not a throw', () => {
    for (const code of [-118, -127, -1791295476]) {
      const err = Exception.create(code, '/tenure/leases/g');
      expect(err).toBeInstanceOf(Error);
      expect(err.code).toBe(code);
      expect(err.message).toContain(String(code));
      expect(err.message).toContain('/tenure/leases/g');
    }
  });

  it('leaves the codes it knows as they were', () => {
    const err = Exception.create(Exception.NO_NODE, '/x');
    expect(err.code).toBe(Exception.NO_NODE);
    expect(err.name).toBe('NO_NODE');
  });

  it('patches once however often it is loaded', () => {
    const first = Exception.create;
    loadZookeeper();
    expect(Exception.create).toBe(first);
  });

  it("sets the version of a transaction's last op, version 0 included, and says so when the driver's shape is not the one it knows", () => {
    const zk = loadZookeeper() as unknown as { createClient(hosts: string): { transaction(): { check(p: string, v: number): unknown; ops: { version: number }[] } } };
    const tx = zk.createClient('127.0.0.1:1').transaction();
    tx.check('/a', 0);
    expect(tx.ops[0]!.version).toBe(-1); // the driver's own `version || -1`
    exactVersion(tx, 0);
    expect(tx.ops[0]!.version).toBe(0);
    expect(() => exactVersion({}, 0)).toThrow(/1\.1\.x expected/);
    expect(() => exactVersion({ ops: [] }, 0)).toThrow(/1\.1\.x expected/);
  });
});
