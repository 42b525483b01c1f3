import { describe, expect, it } from 'vitest';
import IoredisDefault from 'ioredis';
import { DriverMissingError } from '../../src/core/errors.js';
import { loadDriver } from '../../src/core/driver.js';
import { loadIoredis } from '../../src/stores/redis/driver.js';

describe('loadDriver (the one loader of optional peer dependencies)', () => {
  it('returns the default export of an installed driver: the same ioredis for the Redis store and Redlock', () => {
    expect(loadIoredis('redis')).toBe(IoredisDefault);
    expect(loadDriver<unknown>('ioredis', 'redlock')).toBe(IoredisDefault);
  });

  it('names the package and who needs it when the driver is not installed', () => {
    const err = (() => {
      try {
        return loadDriver<unknown>('tenure-no-such-driver', 'redlock');
      } catch (e) {
        return e;
      }
    })();
    expect(err).toBeInstanceOf(DriverMissingError);
    expect(err).toMatchObject({ code: 'DRIVER_MISSING' });
    expect((err as Error).message).toBe("the redlock store needs the 'tenure-no-such-driver' package: npm install tenure-no-such-driver");
  });
});
