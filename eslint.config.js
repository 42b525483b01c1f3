import js from '@eslint/js';
import tseslint from 'typescript-eslint';

export default tseslint.config(
  { ignores: ['dist/**', 'node_modules/**', 'bench/results/**'] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    rules: {
      '@typescript-eslint/no-explicit-any': 'error',
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_' }],
    },
  },
  {
    files: ['src/core/**', 'src/election/**', 'src/locks/**', 'src/raft/**'],
    rules: {
      // Time and chance are injected there (Clock, Random) so the simulator can drive them.
      'no-restricted-globals': ['error', { name: 'setTimeout', message: 'use the injected Clock' }, { name: 'setInterval', message: 'use the injected Clock' }],
      'no-restricted-properties': ['error', { object: 'Date', property: 'now', message: 'use the injected Clock' }, { object: 'Math', property: 'random', message: 'use the injected Random' }],
    },
  },
);
