/**
 * The store registry (`src/stores/registry.ts`) is the one table of backends: every scheme it
 * lists is a URL `parseStoreUrl` reads into that backend's kind, every kind opens through
 * `openStore`, and nothing else does; an unknown scheme is refused with the registry's list.
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { describe, expect, it } from 'vitest';
import { InvalidArgumentError } from '../../src/core/index.js';
import { openStore, parseStoreUrl } from '../../src/open.js';
import type { StoreOptions } from '../../src/open.js';
import { availableSchemes, backendForKind, backendForScheme, notStores, storeBackends } from '../../src/stores/registry.js';

// Compile-time: the registry's kinds are exactly StoreOptions' kinds.
type RegistryKind = (typeof storeBackends)[number]['kind'];
const kindsMatch: [RegistryKind, StoreOptions['kind']] extends [StoreOptions['kind'], RegistryKind] ? true : never = true;

/** A URL of `scheme` that its backend reads: host and port, plus what a scheme cannot do without (azblob's account, key and container). */
function sampleUrl(scheme: string): string {
  if (/^memory$/i.test(scheme)) return `${scheme}:`; // it takes nothing after the colon
  return /^azblobs?$/i.test(scheme) ? `${scheme}://acct:a2V5@127.0.0.1:1/tenure` : `${scheme}://127.0.0.1:1`;
}

function refusal(url: string): string {
  try {
    parseStoreUrl(url);
  } catch (err) {
    expect(err).toBeInstanceOf(InvalidArgumentError);
    return (err as Error).message;
  }
  throw new Error(`${url} was accepted`);
}

describe('store registry', () => {
  it('has one backend per kind and per scheme', () => {
    expect(kindsMatch).toBe(true);
    const kinds = storeBackends.map((b) => b.kind);
    expect(new Set(kinds).size).toBe(kinds.length);
    const schemes = storeBackends.flatMap((b) => b.schemes);
    expect(new Set(schemes).size).toBe(schemes.length);
    for (const s of schemes) expect(s, s).toMatch(/^[a-z][a-z0-9+.-]*$/);
    for (const s of Object.keys(notStores)) expect(schemes, s).not.toContain(s);
  });

  it('reads every registered scheme into its backend, in any case', () => {
    for (const backend of storeBackends) {
      expect(backend.schemes.length, backend.kind).toBeGreaterThan(0);
      for (const scheme of backend.schemes) {
        for (const s of [scheme, scheme.toUpperCase()]) {
          const options = parseStoreUrl(sampleUrl(s));
          expect(options.kind, s).toBe(backend.kind);
          expect(backendForScheme(scheme)).toBe(backend);
        }
      }
      expect(backendForKind(backend.kind)).toBe(backend);
      // What the error lists is what is served.
      for (const shown of backend.shown) expect(backend.schemes, shown).toContain(/^[a-z0-9+.-]+/.exec(shown)![0]);
    }
  });

  it('refuses an unknown scheme, listing every registered one', () => {
    for (const url of ['zookeeper://127.0.0.1:2181', 'consul:x', 'foo:bar', 'toString:x', 'constructor://h:1', 'hasOwnProperty:y']) {
      const message = refusal(url);
      const scheme = url.slice(0, url.indexOf(':')).toLowerCase();
      expect(message).toBe(`store: unknown store scheme '${scheme}:' (available: ${availableSchemes()})`);
      for (const shown of storeBackends.flatMap((b) => b.shown)) expect(message).toContain(shown);
    }
    // The list as users have seen it since 1.0 (derived from the registry now).
    expect(availableSchemes()).toBe('sqlite:PATH, memory:, postgres://, mysql://, redis://, etcd://, etcds://, raft://, rafts://, zk://, azblob://, azblobs:// (and redlock:// for tenure lock)');
  });

  it('refuses options a store does not take, rather than ignore them', () => {
    // Ignored, `?prefix=` on SQLite became part of the file's name (a second database with the
    // default tables), and a misspelt etcd option put the app in the default key space.
    expect(refusal('sqlite:./app.db?prefix=app_')).toBe("store: sqlite:PATH takes no options, got 'prefix' after '?' (a file name with '?' is not supported)");
    expect(refusal('sqlite:./app.db?password=hunter2')).not.toContain('hunter2');
    expect(refusal('sqlite:///srv/t.db?x')).toContain('sqlite:PATH takes no options');
    expect(refusal('memory:?prefix=x')).toBe("store: memory: takes nothing after the colon, got 'memory:?prefix=x'");
    expect(refusal('memory:x')).toContain('memory: takes nothing after the colon');
    expect(refusal('etcd://127.0.0.1:2379?prefx=app/')).toBe("store: unknown etcd:// parameter 'prefx' (known: prefix, tls, ca, cert, key)");
    // Given twice is ambiguous: refused, not read as the first.
    expect(refusal('etcd://127.0.0.1:2379?prefix=a/&prefix=b/')).toBe("store: etcd:// parameter 'prefix' is given twice");
    expect(refusal('zk://127.0.0.1:2181?timeout=1s&timeout=2s')).toBe("store: zk:// parameter 'timeout' is given twice");
    expect(refusal(`zk://127.0.0.1:2181?${'k'.repeat(5000)}=1`)).toBe(`store: unknown zk:// parameter '${'k'.repeat(40)}' (known: timeout)`);
    expect(parseStoreUrl('memory:')).toEqual({ kind: 'memory' });
    expect(parseStoreUrl('memory://')).toEqual({ kind: 'memory' });
    expect(parseStoreUrl('sqlite:./app.db')).toEqual({ kind: 'sqlite', path: './app.db' });
  });

  it('refuses redlock:// as a store with its own message', () => {
    expect(refusal('redlock://127.0.0.1:6379,127.0.0.1:6380')).toBe(`store: ${notStores.redlock!.why}`);
  });

  it('opens every registered kind through openStore and refuses any other kind', async () => {
    await using memory = await openStore('memory:');
    expect(memory.kind).toBe('memory');
    const dir = mkdtempSync(join(tmpdir(), 'tenure-registry-'));
    try {
      await using sqlite = await openStore({ kind: 'sqlite', path: join(dir, 't.db') });
      expect(sqlite.kind).toBe('sqlite');
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
    await expect(openStore({ kind: 'consul' } as unknown as StoreOptions)).rejects.toThrow("unknown store kind 'consul'");
    for (const backend of storeBackends) expect(typeof backend.open, backend.kind).toBe('function');
  });

  it('loads a store module and its driver only when that store is opened', () => {
    // Against the built dist/ (as the CLI tests): a resolve hook reports every store module and
    // driver a fresh process loads while it parses every kind of URL and opens memory:.
    const dir = mkdtempSync(join(tmpdir(), 'tenure-registry-'));
    try {
      writeFileSync(
        join(dir, 'hooks.mjs'),
        'export async function resolve(s, c, next) { const r = await next(s, c); ' +
          "if (/node_modules\\/(pg|mysql2|ioredis|etcd3|better-sqlite3|node-zookeeper-client)\\/|stores\\/[a-z]+\\/[a-z-]+-store\\.js$/.test(r.url)) process.stderr.write('LOADED ' + r.url + '\\n'); return r; }\n",
      );
      writeFileSync(join(dir, 'register.mjs'), `import { register } from 'node:module'; register(${JSON.stringify(pathToFileURL(join(dir, 'hooks.mjs')).href)});\n`);
      const index = pathToFileURL(fileURLToPath(new URL('../../dist/src/index.js', import.meta.url))).href;
      const urls = storeBackends.flatMap((b) => b.schemes.map(sampleUrl));
      const script = `const m = await import(${JSON.stringify(index)}); for (const u of ${JSON.stringify(urls)}) m.parseStoreUrl(u); const s = await m.openStore('memory:'); await s.close();`;
      const r = spawnSync(process.execPath, ['--import', pathToFileURL(join(dir, 'register.mjs')).href, '--input-type=module', '-e', script], { encoding: 'utf8' });
      expect(r.status, r.stderr).toBe(0);
      const loaded = r.stderr.split('\n').filter((l) => l.startsWith('LOADED '));
      expect(loaded).toHaveLength(1);
      expect(loaded[0]).toMatch(/stores\/memory\/memory-store\.js$/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
