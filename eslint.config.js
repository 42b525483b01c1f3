import js from '@eslint/js';
import tseslint from 'typescript-eslint';

// The layers' never-rules (../shared/DESIGN.md, "Layers"), checked on relative import paths, so
// each rule is written for the folder depth of the files it covers. A later block replaces an
// earlier one's no-restricted-imports for the files both match, so every block repeats the CLI rule.
// Dynamic import() is not checked (only open.ts uses it, to load a store on demand).
const noCli = { regex: '^(\\./|(\\.\\./)+)cli(/|$)', message: 'the library never imports the CLI (src/cli); the CLI imports the library' };
const layer = (...patterns) => ({ 'no-restricted-imports': ['error', { patterns: [...patterns, noCli] }] });
const coreOnly = (regex, what) => ({ regex, message: `${what} may import only core/ (and their own layer)` });

export default tseslint.config(
  { ignores: ['dist/**', 'node_modules/**', 'bench/results/**'] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  // The examples are plain Node scripts, as a user would write them.
  { files: ['examples/**/*.mjs'], languageOptions: { globals: { process: 'readonly', console: 'readonly', URL: 'readonly' } } },
  {
    rules: {
      '@typescript-eslint/no-explicit-any': 'error',
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_' }],
    },
  },
  // The library (everything in src/ but the CLI) never imports the CLI.
  { files: ['src/**/*.ts'], ignores: ['src/cli/**'], rules: layer() },
  // core/ imports nothing from the other layers (it has no subfolders: every '../' leaves it).
  { files: ['src/core/**/*.ts'], rules: layer({ regex: '^\\.\\./', message: 'core/ imports nothing outside core/' }) },
  // A store imports only core/, its own folder and the stores' shared files (src/stores/*.ts),
  // never another store's folder; the shared files import only core/ and each other.
  {
    files: ['src/stores/*/*.ts'],
    rules: layer(coreOnly('^\\.\\./\\.\\./(?!core/)', 'stores'), { regex: '^\\.\\./[^./][^/]*/', message: "a store never imports another store's folder" }),
  },
  {
    files: ['src/stores/*.ts'],
    rules: layer(coreOnly('^\\.\\./(?!core/)', "the stores' shared files"), { regex: '^\\./[^/]+/', message: "the stores' shared files never import a store's folder" }),
  },
  // The registry lists the backends: it may load each store folder's backend.ts (scheme, URL
  // parser, lazy opener) and nothing else of a store's folder.
  {
    files: ['src/stores/registry.ts'],
    rules: layer(coreOnly('^\\.\\./(?!core/)', 'the store registry'), { regex: '^\\./[^/]+/(?!backend\\.js$)', message: "the registry imports only a store folder's backend.ts" }),
  },
  // fencing/ (fenced rows over the user's own SQL client, the token's text form) imports only core/.
  { files: ['src/fencing/*.ts'], rules: layer(coreOnly('^\\.\\./(?!core/)', 'fencing/')) },
  // replication/ (followers tailing the leader's log) uses stores only through the Store interface:
  // core/, and fencing/ for the token in message metadata (Model C publishes and reads it with
  // fencing's helpers rather than a copy of them; fencing/ imports only core/, so no cycle).
  {
    files: ['src/replication/*.ts'],
    rules: layer({ regex: '^\\.\\./(?!core/|fencing/)', message: 'replication/ may import only core/ and fencing/ (and its own layer)' }),
  },
  // The Raft store (stores/raft/, when it exists) may also use the consensus library in raft/.
  {
    files: ['src/stores/raft/*.ts'],
    rules: layer(coreOnly('^\\.\\./\\.\\./(?!core/|raft/)', 'the Raft store'), { regex: '^\\.\\./[^./][^/]*/', message: "a store never imports another store's folder" }),
  },
  // The elector's state machine is pure: core/ only, no I/O, not even the rest of election/.
  { files: ['src/election/elector-machine.ts'], rules: layer({ regex: '^(\\./|\\.\\./(?!core/))', message: 'the elector machine imports only core/ (it is pure: the shell in leader-elector.ts does the I/O)' }) },
  // raft/ (the consensus library) imports only core/.
  { files: ['src/raft/*.ts'], rules: layer(coreOnly('^\\.\\./(?!core/)', 'raft/')) },
  { files: ['src/raft/*/*.ts'], rules: layer(coreOnly('^\\.\\./\\.\\./(?!core/)', 'raft/')) },
  {
    files: ['src/core/**', 'src/election/**', 'src/locks/**', 'src/raft/**'],
    rules: {
      // Time and chance are injected there (Clock, Random) so the simulator can drive them.
      'no-restricted-globals': ['error', { name: 'setTimeout', message: 'use the injected Clock' }, { name: 'setInterval', message: 'use the injected Clock' }],
      'no-restricted-properties': ['error', { object: 'Date', property: 'now', message: 'use the injected Clock' }, { object: 'Math', property: 'random', message: 'use the injected Random' }],
    },
  },
);
