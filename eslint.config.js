import js from '@eslint/js';
import tseslint from 'typescript-eslint';

export default tseslint.config(
  { ignores: ['dist/**', 'node_modules/**', 'bench/results/**'] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    rules: {
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_' }],
      'no-console': ['error', { allow: ['error'] }],
    },
  },
  {
    // Tests read decoded protobuf and JSON answers whose shapes they assert on.
    files: ['test/**'],
    rules: { '@typescript-eslint/no-explicit-any': 'off' },
  },
  {
    // The console's browser scripts (plain ES modules, no build step).
    files: ['assets/console/**/*.js'],
    languageOptions: {
      sourceType: 'module',
      globals: Object.fromEntries(
        ['window', 'document', 'sessionStorage', 'fetch', 'AbortController', 'TextDecoderStream', 'requestAnimationFrame', 'ResizeObserver', 'setTimeout', 'clearTimeout', 'setInterval', 'clearInterval', 'console', 'HTMLInputElement', 'HTMLSelectElement', 'Node', 'Option', 'URLSearchParams', 'uPlot'].map((g) => [g, 'readonly']),
      ),
    },
  },
  {
    files: ['src/cli/**', 'bench/**', 'examples/**'],
    rules: { 'no-console': 'off' },
  },
);
