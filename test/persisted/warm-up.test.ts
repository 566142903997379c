// Start-up: every manifest operation is parsed, validated and JIT-compiled before the first request
// (which then pays nothing), without touching data; a restart serves the same ids from the same
// file; a manifest the service cannot honour stops the start with a clear error.
import { test } from 'tap'
import { createRequire } from 'node:module'
import { mkdtempSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'

// A spy on graphql-jit's compileQuery, installed before Mercurius loads (it keeps its own reference):
// the helpers, and so the app, are imported only after this.
const require = createRequire(import.meta.url)
const jitModule =
  require.cache[require.resolve('graphql-jit')] ??
  (require('graphql-jit'), require.cache[require.resolve('graphql-jit')]!)
const realJit = { ...jitModule.exports } as typeof import('graphql-jit')
const compilations: string[] = []
jitModule.exports = {
  ...realJit,
  compileQuery: (...args: Parameters<typeof realJit.compileQuery>) => {
    const op = args[1].definitions.find((d) => d.kind === 'OperationDefinition')
    compilations.push(op && 'name' in op && op.name ? op.name.value : '(anonymous)')
    return realJit.compileQuery(...args)
  }
}
const { buildTestApp } = await import('../helpers/app.ts')
const { countingStore } = await import('../helpers/counting-store.ts')
const { sha256Hex } = await import('../../app/graphql/persisted.ts')
const { MANIFEST_FILE, NO_SHEDDING, PREFLIGHT, manifest, queryIdOf } = await import('./helpers.ts')

const DEVELOPMENT = { PERSISTED_MANIFEST: MANIFEST_FILE, ...NO_SHEDDING }
const VARIABLES: Record<string, Record<string, unknown>> = {
  UserById: { id: '2' },
  UserEmail: { id: '2' },
  Users: {},
  RoomMessages: { roomId: 'general' },
  PostMessage: { roomId: 'general', content: 'hi' }
}

test('every manifest operation is parsed, validated and compiled at start, without touching data; first requests pay nothing', async (t) => {
  const { store, calls } = countingStore()
  const { app, token } = await buildTestApp(t, DEVELOPMENT, { store })
  compilations.length = 0
  calls.length = 0
  await app.ready()

  const names = manifest.operations.map((o) => o.name).sort()
  t.same(compilations.slice().sort(), names, 'each operation compiled once, at start')
  const { persistedWarmUp } = app.graphqlInspection
  t.same(persistedWarmUp, { compiled: names.length, ms: persistedWarmUp!.ms })
  // The manifest is published as an app deployment (and loaded from the store by the app on its own,
  // counting-store.ts ownCalls): no data is read or written.
  t.same(calls.filter((c) => c.method !== 'publishDeployment'), [], 'the warm-up read and wrote no data (it executes nothing)')
  const planned = app.graphqlInspection.planCache.entries

  const auth = { authorization: `Bearer ${token('1', 'ADMIN')}` }
  for (const op of manifest.operations) {
    for (let i = 0; i < 2; i++) {
      const response = await app.inject({
        method: 'POST',
        url: '/graphql',
        headers: auth,
        payload: { queryId: `sha256:${op.id}`, variables: VARIABLES[op.name!] }
      })
      t.notOk(response.json().errors, `${op.name} runs`, { errors: response.json().errors })
    }
  }
  t.equal(compilations.length, names.length, 'no request compiled anything')
  t.equal(app.graphqlInspection.planCache.entries, planned, 'no request planned (parsed, validated) anything')

  // The same measurement sees an operation that was not registered: planned and compiled on its first use, once.
  for (let i = 0; i < 2; i++) {
    await app.inject({ method: 'POST', url: '/graphql', payload: { query: 'query NotRegistered { users { id } }' } })
  }
  t.same(compilations.slice(names.length), ['NotRegistered'])
  t.equal(app.graphqlInspection.planCache.entries, planned + 1)
})

test('an operation over a caller budget at start is still planned; each request is priced for its caller', async (t) => {
  // With an administrator budget of 100, RoomMessages (cost 120 with its default page) is over the
  // administrator's budget but within a service account's: pricing is per request, planning is not.
  const { app, token } = await buildTestApp(t, { ...DEVELOPMENT, COST_BUDGET_ADMIN: '100' })
  compilations.length = 0
  await app.ready()
  t.ok(compilations.includes('RoomMessages'), 'compiled at start')
  compilations.length = 0
  const as = (sub: string, role: 'ADMIN' | 'SERVICE') =>
    app.inject({
      method: 'POST' as const,
      url: '/graphql',
      headers: { authorization: `Bearer ${token(sub, role)}` },
      payload: { queryId: queryIdOf('RoomMessages'), variables: { roomId: 'general' } }
    })
  t.match((await as('1', 'ADMIN')).json().errors, [
    { message: 'Query cost 120 exceeds the budget of 100 for this caller', extensions: { code: 'COST_LIMIT_EXCEEDED' } }
  ])
  t.ok(Array.isArray((await as('5', 'SERVICE')).json().data.messages), 'a caller with a larger budget runs it')
  t.same(compilations, [], 'no request compiled anything')
})

test('restart: an app built again from the same manifest file serves the same ids; in-memory APQ registrations are gone', async (t) => {
  const text = 'query Registered { users(limit: 1) { id } }'
  const apq = { extensions: { persistedQuery: { version: 1, sha256Hash: sha256Hex(text) } } }
  const get = {
    method: 'GET' as const,
    url: `/graphql?queryId=${queryIdOf('UserById')}&variables=${encodeURIComponent('{"id":"3"}')}`,
    headers: PREFLIGHT
  }

  const first = await buildTestApp(t, DEVELOPMENT)
  t.equal((await first.app.inject(get)).json().data.user.name, 'Alan Turing')
  t.ok(
    (await first.app.inject({ method: 'POST', url: '/graphql', payload: { query: text, ...apq } })).json().data,
    'registered by APQ'
  )
  t.ok((await first.app.inject({ method: 'POST', url: '/graphql', payload: apq })).json().data, 'hit')
  await first.app.close()

  const second = await buildTestApp(t, DEVELOPMENT)
  await second.app.ready()
  t.equal(second.app.graphqlInspection.persistedWarmUp!.compiled, manifest.operations.length, 'warmed up again')
  t.equal((await second.app.inject(get)).json().data.user.name, 'Alan Turing', 'the manifest ids survive the restart')
  t.equal((await second.app.inject({ method: 'POST', url: '/graphql', payload: apq })).json().errors[0].extensions.code, 'PERSISTED_QUERY_NOT_FOUND',
    'automatic registrations live in memory (or Redis), not in the manifest')
})

test('a manifest the service cannot honour stops the start with a clear error', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'persisted-'))
  const text = 'query A { users { id } }'
  const file = join(dir, 'tampered.json')
  writeFileSync(file, JSON.stringify({ [`sha256:${sha256Hex('query A { users { name } }')}`]: text }))
  await t.rejects(buildTestApp(t, { PERSISTED_MANIFEST: file }), {
    message: new RegExp(
      `Persisted query manifest ${file}: id "sha256:[0-9a-f]{64}" does not match the sha256 of its text`
    )
  })

  const unknownField = join(dir, 'drifted.json')
  const drifted = 'query Old { user(id: "1") { nickname } }'
  writeFileSync(unknownField, JSON.stringify({ [sha256Hex(drifted)]: drifted }))
  await t.rejects(buildTestApp(t, { PERSISTED_MANIFEST: unknownField }), {
    message: /^Persisted query manifest \S+drifted\.json: query Old \(sha256:[0-9a-f]{12}…\): Cannot query field "nickname" on type "User"/
  })

  // The service's own limits (here MAX_DEPTH) are applied when the manifest is checked.
  await t.rejects(buildTestApp(t, { ...DEVELOPMENT, MAX_DEPTH: '2' }), {
    message: new RegExp(
      `Persisted query manifest ${MANIFEST_FILE.replaceAll('/', '\\/')}: query RoomMessages \\(${queryIdOf('RoomMessages').slice(0, 19)}…\\): Query depth 3 exceeds the maximum depth of 2`
    )
  })
})
