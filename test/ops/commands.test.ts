// Every command of package.json explains itself: `--help` prints its usage on standard output and exits 0
// without reading any setting; an unknown option prints one line naming it, then the usage, on standard
// error, and exits 2: never a stack trace. Each command is run as its npm script runs it (the script's
// file and arguments, with the project's Node), with an environment of PATH and HOME only.
import { test } from 'tap'
import { spawnSync } from 'node:child_process'
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { REPO } from '../helpers/server-process.ts'

const scripts = (JSON.parse(readFileSync(join(REPO, 'package.json'), 'utf8')) as { scripts: Record<string, string> }).scripts
/** Scripts that run another tool (tsc, eslint, tap, apt-get) rather than a command of this project. */
const TOOLS = new Set(['typecheck', 'lint', 'pretest', 'test', 'test:cluster', 'test:redis-cluster'])

/** The file and arguments a script runs with node ("NODE_ENV=… exec node --watch app/server.ts" → app/server.ts). */
function commandOf (script: string): string[] {
  const words = script.split(/\s+/).filter((w) => !/^[A-Z_]+=/.test(w) && w !== 'exec')
  if (words[0] !== 'node') throw new Error(`not a node command: ${script}`)
  return words.slice(1).filter((w) => !w.startsWith('--'))
}

function run (args: string[]) {
  const result = spawnSync(process.execPath, args, {
    cwd: REPO,
    env: { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '/tmp' },
    encoding: 'utf8',
    timeout: 30_000
  })
  return { status: result.status, stdout: result.stdout, stderr: result.stderr }
}

const commands = Object.entries(scripts).filter(([name]) => !TOOLS.has(name))

test('the commands are the ones this test knows: partner and migrate among them', async (t) => {
  const names = commands.map(([name]) => name)
  for (const expected of ['start', 'dev', 'seed', 'token', 'partner:create', 'partner', 'migrate', 'schema:export', 'schema:check', 'persisted:build', 'app', 'settings:docs', 'bench', 'bench:check']) {
    t.ok(names.includes(expected), `npm run ${expected}`)
  }
})

for (const [name, script] of commands) {
  test(`npm run ${name}: --help, and an unknown option`, async (t) => {
    const command = commandOf(script)
    const help = run([...command, '--help'])
    t.equal(help.status, 0, `--help exits 0: ${help.stderr}`)
    t.match(help.stdout, /^usage: /, 'prints its usage')
    t.ok(help.stdout.trim().split('\n').length >= 2, 'and what the command does')
    t.equal(help.stderr, '', 'nothing on standard error')

    const bad = run([...command, '--no-such-option'])
    t.equal(bad.status, 2, 'an unknown option exits 2')
    const lines = bad.stderr.trimEnd().split('\n')
    t.match(lines[0], /--no-such-option/, 'its first line names the option')
    t.match(lines[1], /^usage: /, 'then the usage')
    t.notMatch(bad.stderr, /^\s+at /m, 'no stack trace')
    t.notMatch(bad.stderr, /TypeError|ERR_PARSE_ARGS/, 'no error class')
    t.equal(bad.stdout, '', 'nothing on standard output')
  })
}
