// Lint config: neostandard (the style Fastify's own projects use) with TypeScript, plus a 120-column limit.
import neostandard from 'neostandard'

export default [
  ...neostandard({
    ts: true,
    ignores: ['node_modules/**', 'bench/results/**', 'bench/profiles/**', '.tap/**']
  }),
  {
    rules: {
      // `void promise` marks a promise deliberately not awaited (its errors are handled where it settles).
      'no-void': ['error', { allowAsStatement: true }],
      // Long message strings, URLs and regexes stay on one line (grep-able); code and comments wrap at 120.
      '@stylistic/max-len': ['error', {
        code: 120,
        ignoreUrls: true,
        ignoreStrings: true,
        ignoreTemplateLiterals: true,
        ignoreRegExpLiterals: true
      }]
    }
  },
  {
    // Polling loops whose condition a callback or another task changes (the rule cannot see it).
    files: ['bench/**', 'test/**'],
    rules: { 'no-unmodified-loop-condition': 'off' }
  },
  {
    // The bench's servers answer and return in one statement (`return void response.end(...)`).
    files: ['bench/**'],
    rules: { 'no-void': 'off' }
  }
]
