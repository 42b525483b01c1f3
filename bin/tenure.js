#!/usr/bin/env node
// The tenure command. Its code is built into dist/ by `npm run build`.
import process from 'node:process';

let cli;
try {
  cli = await import('../dist/src/cli/main.js');
} catch (err) {
  if (err?.code !== 'ERR_MODULE_NOT_FOUND' || !String(err.message).includes('dist/src/cli/main.js')) throw err;
  process.stderr.write('tenure: the command is not built yet: run npm run build\n');
  process.exit(1);
}
await cli.runCli();
