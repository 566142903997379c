// Registration at deploy time: the build command and the manifest loader (every format, every hash checked).
import { test } from 'tap'
import { createHash } from 'node:crypto'
import { execFile } from 'node:child_process'
import { mkdtempSync, readFileSync, writeFileSync, mkdirSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { promisify } from 'node:util'
import { buildManifest } from '../../cli/persisted-build.ts'
import { sha256Hex } from '../../app/graphql/persisted.ts'
import { loadManifests } from '../../app/graphql/persisted-manifest.ts'
import { OPERATIONS_DIR, manifest } from './helpers.ts'

const run = promisify(execFile)
const BUILD = new URL('../../cli/persisted-build.ts', import.meta.url).pathname

function tempDir (files: Record<string, string>): string {
  const dir = mkdtempSync(join(tmpdir(), 'persisted-'))
  for (const [name, text] of Object.entries(files)) writeFileSync(join(dir, name), text)
  return dir
}

test('the committed example manifest is what the build makes of persisted/operations', async (t) => {
  t.same(
    buildManifest(OPERATIONS_DIR),
    manifest,
    'run `npm run persisted:build -- persisted/operations` after changing an operation'
  )
  const userById = manifest.operations.find((o) => o.name === 'UserById')!
  t.equal(userById.body, 'query UserById($id: ID!) {\n  user(id: $id) {\n    id\n    name\n    createdAt\n  }\n}')
  t.equal(userById.id, sha256Hex(userById.body))
})

test('the build command writes a manifest the service loads', async (t) => {
  const dir = tempDir({
    'a.graphql': '# comments and layout are normalised\nquery A { users(limit: 2) { id } }',
    'b.gql': 'query B($id: ID!) { user(id: $id) { ...F } } fragment F on User { id name }'
  })
  const out = join(dir, 'out', 'manifest.json')
  const { stdout } = await run(process.execPath, [BUILD, dir, '--out', out])
  t.match(stdout, /Wrote 2 operations/)
  t.match(stdout, /query A {2}queryId sha256:[0-9a-f]{64}/)
  const written = JSON.parse(readFileSync(out, 'utf8'))
  t.equal(written.format, 'apollo-persisted-query-manifest')
  t.same(written.operations.map((o: { name: string }) => o.name), ['A', 'B'])
  const loaded = loadManifests([out])
  t.equal(loaded.operations.length, 2)
  t.equal(loaded.byId.get(`sha256:${written.operations[0].id}`)?.text, 'query A {\n  users(limit: 2) {\n    id\n  }\n}')
})

test('the build refuses several operations in one document, invalid documents and duplicate names', async (t) => {
  const dir = tempDir({
    'two.graphql': 'query One { users { id } } query Two { users { name } }',
    'invalid.graphql': 'query Bad { users { id nope } }',
    'valid.graphql': 'query Fine { messages(roomId: "r") { author { id } } }',
    'syntax.graphql': 'query {',
    'anonymous.graphql': '{ users { id } }',
    'dup1.graphql': 'query Same { users { id } }',
    'dup2.graphql': 'query Same { users { name } }'
  })
  const failed = await run(process.execPath, [BUILD, dir, '--out', join(dir, 'm.json')]).then(() => null, (err) => err)
  t.ok(failed, 'the command fails')
  t.equal(failed.code, 1)
  t.match(failed.stderr, /two\.graphql: it contains 2 operations; register one operation per document/)
  t.match(failed.stderr, /invalid\.graphql: Cannot query field "nope" on type "User"/)
  t.match(failed.stderr, /syntax\.graphql: Syntax Error/)
  t.match(failed.stderr, /anonymous\.graphql: the operation needs a name/)
  t.match(failed.stderr, /dup2\.graphql: operation name Same is already used by .*dup1\.graphql/)
  t.notMatch(failed.stderr, /\/valid\.graphql/, 'a valid document is not reported')
  t.throws(() => readFileSync(join(dir, 'm.json')), 'nothing is written')

  const tooDeep = tempDir({})
  mkdirSync(join(tooDeep, 'sub'))
  writeFileSync(join(tooDeep, 'sub', 'deeper.graphql'), 'query Deeper { messages(roomId: "r") { author { id } } }')
  const maxDepth = process.env.MAX_DEPTH
  process.env.MAX_DEPTH = '2'
  t.teardown(() => { if (maxDepth === undefined) delete process.env.MAX_DEPTH; else process.env.MAX_DEPTH = maxDepth })
  t.throws(() => buildManifest(tooDeep), /sub\/deeper\.graphql: Query depth 3 exceeds the maximum depth of 2/, 'the service\'s own limits apply (MAX_DEPTH from the environment), in sub-folders too')
})

test('the loader reads Apollo manifests and Relay id → text maps, and verifies every hash', async (t) => {
  const text = 'query UserName($id: ID!) { user(id: $id) { name } }'
  const md5 = createHash('md5').update(text).digest('hex')
  const dir = tempDir({
    'relay.json': JSON.stringify({ [md5]: text }),
    'prefixed.json': JSON.stringify({ [`sha256:${sha256Hex(text)}`]: text }),
    'apollo.json': JSON.stringify({
      format: 'apollo-persisted-query-manifest',
      version: 1,
      operations: [{ id: sha256Hex(text), name: 'UserName', type: 'query', body: text }]
    })
  })
  for (const file of ['relay.json', 'prefixed.json', 'apollo.json']) {
    const loaded = loadManifests([join(dir, file)])
    t.equal(loaded.operations.length, 1, file)
    t.equal(loaded.byId.get(`sha256:${sha256Hex(text)}`)?.name, 'UserName', `${file}: reachable by sha256:<hex>`)
  }
  t.equal(loadManifests([join(dir, 'relay.json')]).byId.get(md5)?.text, text, 'and by the id the manifest gave')
  const both = loadManifests([join(dir, 'relay.json'), join(dir, 'apollo.json')])
  t.equal(both.operations.length, 1, 'the same text from two manifests is one operation')
})

test('the loader refuses a manifest whose hash does not match, with a clear startup error', async (t) => {
  const text = 'query A { users { id } }'
  const wrong = sha256Hex('query A { users { name } }')
  const dir = tempDir({
    'mismatch.json': JSON.stringify({ [`sha256:${wrong}`]: text }),
    'apollo-mismatch.json': JSON.stringify({ format: 'apollo-persisted-query-manifest', version: 1, operations: [{ id: wrong, name: 'A', type: 'query', body: text }] }),
    'not-a-hash.json': JSON.stringify({ 'my-query': text }),
    'two-ops.json': JSON.stringify({ [sha256Hex('query A { users { id } } query B { users { id } }')]: 'query A { users { id } } query B { users { id } }' }),
    'wrong-name.json': JSON.stringify({ format: 'apollo-persisted-query-manifest', version: 1, operations: [{ id: sha256Hex(text), name: 'B', type: 'query', body: text }] }),
    'other-format.json': JSON.stringify({ format: 'something-else', version: 3, operations: [] }),
    'broken.json': '{'
  })
  t.throws(() => loadManifests([join(dir, 'mismatch.json')]), {
    message: new RegExp(
      `mismatch\\.json: id "sha256:${wrong}" does not match the sha256 of its text \\(${sha256Hex(text)}\\)`
    )
  })
  t.throws(() => loadManifests([join(dir, 'apollo-mismatch.json')]), /does not match the sha256 of its text/)
  t.throws(() => loadManifests([join(dir, 'not-a-hash.json')]), /id "my-query" is not a hash/)
  t.throws(() => loadManifests([join(dir, 'two-ops.json')]), /cannot be registered: it contains 2 operations/)
  t.throws(() => loadManifests([join(dir, 'wrong-name.json')]), /is listed as query B but its text holds query A/)
  t.throws(() => loadManifests([join(dir, 'other-format.json')]), /unknown manifest format "something-else"/)
  t.throws(() => loadManifests([join(dir, 'broken.json')]), /broken\.json: .*JSON/)
  t.throws(() => loadManifests([join(dir, 'missing.json')]), /missing\.json: ENOENT/)
})
