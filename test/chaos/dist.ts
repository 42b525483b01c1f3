/**
 * The chaos suite runs compiled fixtures from dist/ (as users run the package). `ensureBuilt`
 * rebuilds (tsc -p tsconfig.build.json) when a fixture is missing or older than any source.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, readdirSync, statSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

export const repoRoot = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..');

/** The compiled path of test/fixtures/NAME.ts. */
export function fixture(name: string): string {
  return join(repoRoot, 'dist', 'test', 'fixtures', `${name}.js`);
}

function newestMtime(dir: string): number {
  let newest = 0;
  if (!existsSync(dir)) return newest;
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) newest = Math.max(newest, newestMtime(path));
    else if (entry.name.endsWith('.ts')) newest = Math.max(newest, statSync(path).mtimeMs);
  }
  return newest;
}

/** True when every named fixture exists in dist and is newer than src/ and test/fixtures/. */
export function isBuilt(names: readonly string[]): boolean {
  const sources = Math.max(newestMtime(join(repoRoot, 'src')), newestMtime(join(repoRoot, 'test', 'fixtures')));
  return names.every((n) => existsSync(fixture(n)) && statSync(fixture(n)).mtimeMs >= sources);
}

export const chaosFixtures = ['chaos-node', 'chaos-follower', 'chaos-sqlite-lock'] as const;

/**
 * Build dist/ when the chaos fixtures are missing or stale. tsc emits even when some file has a
 * type error, so a build that complains elsewhere still serves when the chaos fixtures came out.
 */
export function ensureBuilt(): void {
  if (isBuilt(chaosFixtures)) return;
  try {
    execFileSync(process.execPath, [join(repoRoot, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', 'tsconfig.build.json'], {
      cwd: repoRoot,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
  } catch (err) {
    const out = String((err as { stdout?: Buffer }).stdout ?? '');
    const missing = chaosFixtures.filter((n) => !existsSync(fixture(n)));
    if (missing.length > 0 || /test\/fixtures\/chaos-/.test(out)) {
      throw new Error(`build failed (npm run build):\n${out}`, { cause: err });
    }
  }
}
