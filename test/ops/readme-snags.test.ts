// The README's snags a first week met, held: it stays under 300 lines; its signed-SOAP steps run as
// written on one development server (the first one stopped, then started again with the signing key:
// not a second server on the same port and store) and write their keys under data/, which git ignores;
// .env.example names no package the project does not depend on.
import { test } from 'tap'
import { spawnSync } from 'node:child_process'
import { mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { REPO, runScript, startService } from '../helpers/server-process.ts'

const readme = readFileSync(join(REPO, 'README.md'), 'utf8')

test('the README stays under 300 lines', async (t) => {
  const lines = readme.trimEnd().split('\n').length
  t.ok(lines < 300, `${lines} lines`)
})

/** The ```sh block of the signed-SOAP steps, and the paragraph before it. */
function signedSoapSteps (): { before: string; block: string } {
  const start = readme.indexOf('Partners that sign instead')
  const open = readme.indexOf('```sh\n', start)
  const close = readme.indexOf('```\n', open + 6)
  if (start < 0 || open < 0 || close < 0) throw new Error('README: no signed-SOAP steps')
  return { before: readme.slice(start, open), block: readme.slice(open + 6, close) }
}

test('every key and certificate the README makes is written where git ignores it', async (t) => {
  const written = readme.split('\n').filter((line) => /\bopenssl req\b/.test(line))
    .flatMap((line) => [...line.matchAll(/-(?:keyout|out) (\S+)/g)].map((m) => m[1]!))
  t.ok(written.length >= 4, `${written.length} files: ${written.join(', ')}`)
  for (const file of written) {
    t.match(file, /^data\//, `${file} is under data/`)
    const ignored = spawnSync('git', ['check-ignore', '-q', file], { cwd: REPO })
    t.equal(ignored.status, 0, `git ignores ${file}`)
  }
  for (const stray of ['service-key.pem', 'x/bank.key']) {
    t.equal(spawnSync('git', ['check-ignore', '-q', stray], { cwd: REPO }).status, 0, `${stray}: a key made anywhere else in the checkout is ignored too`)
  }
})

test('the signed-SOAP steps run as written: the development server restarted with its key, a partner, a signed call', async (t) => {
  const { before, block } = signedSoapSteps()
  t.match(before, /Stop the development\s+server first \(Ctrl\+C/, 'the README stops the first server before starting another')
  t.notMatch(block, /npm run dev/, 'no second server in watch mode (it waits for file changes when the port is taken)')
  const lines = block.trimEnd().split('\n')
  const serverAt = lines.findIndex((line) => /npm start/.test(line))
  const server = /^((?:[A-Z_]+=\S+ )+)npm start\b/.exec(lines[serverAt]!)
  t.ok(server, 'the server line is settings then npm start')

  // The test's own folder for the keys and the store, and its own port: nothing written into the checkout.
  const dir = mkdtempSync(join(tmpdir(), 'readme-soap-'))
  t.teardown(() => rmSync(dir, { recursive: true, force: true }))
  const local = (text: string) => text.replaceAll('data/keys', join(dir, 'keys'))
  const store = join(dir, 'service.db')
  const keys = await runScript(local(lines.slice(0, serverAt).join('\n')))
  t.equal(keys.code, 0, keys.stderr)
  const settings = Object.fromEntries(server![1]!.trim().split(' ').map((pair) => local(pair).split('=') as [string, string]))
  t.same(Object.keys(settings), ['SOAP_SIGNING_KEY', 'SOAP_SIGNING_CERT'])
  const service = await startService(t, { ...settings, PORT: '0', SQLITE_PATH: store })
  const port = new URL(service.url).port

  const rest = local(lines.slice(serverAt + 1).join('\n')).replaceAll(':3000', `:${port}`)
  const call = await runScript(`export SQLITE_PATH=${store}\n${rest}`)
  t.equal(call.code, 0, call.stderr)
  t.match(call.stdout, /partner "bank" → user \S+ \(SERVICE\)/, 'the partner is registered in the running server\'s store')
  t.match(call.stdout, /\{[^}]*id: '2'[^}]*name: 'Ada Lovelace'/, 'node-soap\'s signed GetUser answered with Ada')
  t.match(call.stdout, /-----BEGIN CERTIFICATE-----/, 'and the service\'s certificate is served')
})

test('.env.example names only packages the project depends on', async (t) => {
  const pkg = JSON.parse(readFileSync(join(REPO, 'package.json'), 'utf8'))
  const dependencies = new Set(Object.keys({ ...pkg.dependencies, ...pkg.devDependencies }))
  const named = [...readFileSync(join(REPO, '.env.example'), 'utf8').matchAll(/@[a-z0-9-]+\/[a-z0-9.-]+/g)].map((m) => m[0])
  for (const name of named) t.ok(dependencies.has(name), `${name} is a dependency`)
  t.pass(`${named.length} package names`)
})
