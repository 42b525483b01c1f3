/**
 * How the Redis store makes its commands (src/stores/redis/driver.ts): without the argument copy
 * of ioredis's Command constructor where that writes the very same bytes, with it otherwise.
 * These need no server: they compare what the commands would write.
 */
import { Command } from 'ioredis';
import { describe, expect, it } from 'vitest';
import { commandMaker, uncopiedCommandsMatch } from '../../src/stores/redis/driver.js';

const wire = (c: Command): string => {
  const w = c.toWritable({});
  return typeof w === 'string' ? w : w.toString('latin1');
};

describe('Redis store commands', () => {
  it('skip the argument copy with the installed ioredis (its commands match the constructor’s)', () => {
    expect(uncopiedCommandsMatch(Command)).toBe(true);
  });

  it('write the same bytes and name the same keys as the constructor’s, for text, numbers and bytes', () => {
    const make = commandMaker(Command, undefined);
    const cases: (string | number | Buffer)[][] = [
      ['sha', 3, '{p}:lease:a', '{p}:term:a', '{p}:names', 'a', 'node~1', 2000, '{"region":"eü"}', '{p}:events:a'],
      ['sha', 1, '{p}:names', Buffer.from('[a'), Buffer.concat([Buffer.from('[a'), Buffer.from([0xff])]), '{p}:lease:', 100000],
      ['sha', 0],
    ];
    for (const args of cases) {
      const ours = make('evalsha', [...args]);
      const theirs = new Command('evalsha', [...args], { replyEncoding: 'utf8' });
      expect(wire(ours)).toBe(wire(theirs));
      expect(ours.getKeys()).toEqual(theirs.getKeys());
      expect(ours.args).toEqual(theirs.args);
    }
    const xrange = make('xrange', ['{p}:stream:s', '5', '+', 'COUNT', 10]);
    expect(wire(xrange)).toBe(wire(new Command('xrange', ['{p}:stream:s', '5', '+', 'COUNT', 10])));
  });

  it("apply the client's key prefix to the keys only, as its own methods do", () => {
    const make = commandMaker(Command, 'app:');
    const c = make('evalsha', ['sha', 2, '{p}:lease:a', '{p}:term:a', 'owner', 2000]);
    expect(c.getKeys()).toEqual(['app:{p}:lease:a', 'app:{p}:term:a']);
    expect(c.args).toEqual(['sha', '2', 'app:{p}:lease:a', 'app:{p}:term:a', 'owner', '2000']);
  });

  it('decode replies as text', async () => {
    const c = commandMaker(Command, undefined)('evalsha', ['sha', 0]);
    c.resolve(Buffer.from('node~1\n3\n2000\n{}'));
    expect(await c.promise).toBe('node~1\n3\n2000\n{}');
  });
});
