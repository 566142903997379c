// One store suite, run against both implementations.
import { createHash } from 'node:crypto'
import { test, type Test } from 'tap'
import { openPostgresStore } from '../app/core/store/postgres.ts'
import { openSqliteStore } from '../app/core/store/sqlite.ts'
import { loadDemoData, seed } from '../app/core/store/sample-data.ts'
import type { Store } from '../app/core/store/types.ts'
import { freshSchema, postgresRelay, TEST_DATABASE_URL } from './helpers/postgres.ts'

type Open = (t: Test) => Promise<Store>

const implementations: Record<string, Open> = {
  sqlite: async () => openSqliteStore(':memory:'),
  postgres: async (t) =>
    openPostgresStore({ url: TEST_DATABASE_URL, poolSize: 4, schema: await freshSchema(t, 'store') })
}

for (const [kind, open] of Object.entries(implementations)) {
  test(`${kind} store`, async (t) => {
    const store = await open(t)
    t.teardown(() => store.close())
    t.equal(store.kind, kind)

    await t.test('creates, reads, lists users in creation order', async (t) => {
      const a = await store.createUser({ name: 'Ada', email: 'ada@example.com', createdAt: '2025-01-01T00:00:00.000Z' })
      const b = await store.createUser({
        id: '007',
        name: 'Bond',
        email: 'bond@example.com',
        role: 'SERVICE',
        adminNotes: 'licence',
        createdAt: '2025-01-02T00:00:00.000Z'
      })
      t.match(a, {
        name: 'Ada',
        email: 'ada@example.com',
        role: 'USER',
        adminNotes: null,
        createdAt: '2025-01-01T00:00:00.000Z'
      })
      t.match(a.id, /^[0-9a-f-]{36}$/)
      t.same(b, {
        id: '007',
        name: 'Bond',
        email: 'bond@example.com',
        role: 'SERVICE',
        adminNotes: 'licence',
        createdAt: '2025-01-02T00:00:00.000Z'
      })
      const found = await store.usersByIds(['007', a.id, 'missing'])
      t.same(found.map((u) => u.id).sort(), ['007', a.id].sort())
      t.same(await store.usersByIds(['007']), [b], 'one id (the common batch): the same row')
      t.same(await store.usersByIds(['missing']), [], 'one unknown id: no row')
      t.same((await store.listUsers(10)).map((u) => u.id), [a.id, '007'])
      t.same((await store.listUsers(1)).map((u) => u.id), [a.id])
      t.equal(await store.countUsers(), 2)
    })

    await t.test('refuses a duplicate e-mail with CONFLICT and changes nothing', async (t) => {
      const before = await store.countUsers()
      await t.rejects(store.createUser({ name: 'Other', email: 'ada@example.com' }), { code: 'CONFLICT' })
      t.equal(await store.countUsers(), before)
    })

    await t.test('updates only the given fields', async (t) => {
      const updated = await store.updateUser('007', { name: 'James Bond', adminNotes: null })
      t.match(updated, { id: '007', name: 'James Bond', email: 'bond@example.com', adminNotes: null, role: 'SERVICE' })
      t.equal(await store.updateUser('missing', { name: 'x' }), null)
      t.match(await store.updateUser('007', {}), { name: 'James Bond' })
      await t.rejects(store.updateUser('007', { email: 'ada@example.com' }), { code: 'CONFLICT' })
    })

    await t.test('messages: newest window of a room, oldest first; deleting a user removes theirs and names their rooms', async (t) => {
      const [author] = await store.usersByIds(['007'])
      for (let i = 1; i <= 5; i++) await store.createMessage({ roomId: 'r1', content: `m${i}`, authorId: author!.id })
      await store.createMessage({ roomId: 'r2', content: 'other room', authorId: author!.id })
      const window = await store.messagesByRoom('r1', 3)
      t.same(window.map((m) => m.content), ['m3', 'm4', 'm5'])
      t.match(window[0], { roomId: 'r1', authorId: '007', id: /^\d+$/, createdAt: /^\d{4}-\d\d-\d\dT/ })
      const deleted = await store.deleteUser('007')
      t.same(deleted?.rooms.sort(), ['r1', 'r2'], 'the rooms their messages were deleted from')
      t.equal(await store.deleteUser('007'), null, 'gone already')
      t.same(await store.messagesByRoom('r1', 10), [])
    })

    await t.test('credentials for partners', async (t) => {
      const [user] = await store.insertUsers([{ name: 'Partner', email: 'partner@example.com', role: 'SERVICE' }])
      t.equal(await store.findCredentials('partner'), null)
      await store.setCredentials(user!.id, 'partner', 'hash', 'sealed')
      t.same(await store.findCredentials('partner'), {
        userId: user!.id,
        login: 'partner',
        role: 'SERVICE',
        passwordHash: 'hash',
        passwordSecret: 'sealed'
      })
    })

    await t.test('certificates of partners: found by fingerprint, newest first, replaced whole', async (t) => {
      const [user] = await store.insertUsers([{ name: 'Signer', email: 'signer@example.com', role: 'SERVICE' }])
      await store.setCredentials(user!.id, 'signer', null, null)
      const older = { fingerprint: 'a'.repeat(64), thumbprint: 'a'.repeat(40), issuerSerial: 'e'.repeat(64), login: 'signer', pem: 'PEM-A', addedAt: '2026-01-01T00:00:00.000Z' }
      const newer = { fingerprint: 'b'.repeat(64), thumbprint: 'b'.repeat(40), issuerSerial: 'f'.repeat(64), login: 'signer', pem: 'PEM-B', addedAt: '2026-02-01T00:00:00.000Z' }
      await store.replaceCertificates('signer', [older, newer])
      t.same(await store.certificatesOf('signer'), [newer, older])
      t.same(await store.findCertificate(newer.fingerprint), { ...newer, userId: user!.id, role: 'SERVICE' })
      t.same(await store.findCertificateByThumbprint(older.thumbprint), { ...older, userId: user!.id, role: 'SERVICE' })
      t.same(await store.findCertificateByIssuerSerial(newer.issuerSerial), { ...newer, userId: user!.id, role: 'SERVICE' })
      await store.replaceCertificates('signer', [older, { ...newer, issuerSerial: older.issuerSerial }])
      t.equal(await store.findCertificateByIssuerSerial(older.issuerSerial), null, 'an issuer and serial two certificates share names neither')
      await store.replaceCertificates('signer', [newer])
      t.equal(await store.findCertificate(older.fingerprint), null, 'a replaced certificate is gone')
      t.equal(await store.findCertificate('c'.repeat(64)), null)
    })

    await t.test('partner accounts: listed by login with their password styles; removed with their certificates', async (t) => {
      const [user] = await store.insertUsers([{ name: 'Leaving', email: 'leaving@example.com', role: 'SERVICE' }])
      await store.setCredentials(user!.id, 'leaving', 'hash', null)
      const certificate = { fingerprint: 'd'.repeat(64), thumbprint: 'd'.repeat(40), issuerSerial: 'd'.repeat(64), login: 'leaving', pem: 'PEM-D', addedAt: '2026-03-01T00:00:00.000Z' }
      await store.replaceCertificates('leaving', [certificate])
      const listed = await store.listPartners()
      t.same(listed.map((p) => p.login), ['leaving', 'partner', 'signer'], 'every login, in order')
      t.same(listed[0], { login: 'leaving', userId: user!.id, name: 'Leaving', role: 'SERVICE', passwordText: true, passwordDigest: false })
      t.same(listed[1], { login: 'partner', userId: listed[1]!.userId, name: 'Partner', role: 'SERVICE', passwordText: true, passwordDigest: true })

      t.equal(await store.removePartner('leaving'), true)
      t.equal(await store.findCredentials('leaving'), null, 'the login no longer authenticates')
      t.equal(await store.findCertificate(certificate.fingerprint), null, 'nor its certificate')
      t.same((await store.usersByIds([user!.id])).map((u) => u.name), ['Leaving'], 'the user stays')
      t.same((await store.listPartners()).map((p) => p.login), ['partner', 'signer'])
      t.equal(await store.removePartner('leaving'), false, 'a login nobody has')
    })

    await t.test('seeds realistic data in bulk and loads the demo set only into an empty store', async (t) => {
      const before = await store.countUsers()
      const ids = await seed(store, 300, 1200, 42)
      t.equal(ids.length, 300)
      t.equal(await store.countUsers(), before + 300)
      const general = await store.messagesByRoom('general', 100)
      t.ok(general.length > 0 && general.length <= 100)
      await loadDemoData(store)
      t.equal(await store.countUsers(), before + 300, 'demo data is not added to a store that has users')
    })

    await t.test('app deployments: published all at once, idempotent, conflicting content refused, retired, counted', async (t) => {
      const op = (body: string, clientId: string | null = null) =>
        ({ hash: createHash('sha256').update(body).digest('hex'), body, name: body.split(/[ {(]/)[1] ?? null, type: 'query', clientId, weight: 1000 })
      const users = op('query Users { users(first: 1) { edges { node { id } } } }')
      const me = op('query Me { me { id } }', 'relay-md5-id')
      const first = { name: 'ios', version: '1.0.0', contentHash: 'c1', operations: [users, me], maxWeight: 1e9 }
      t.equal(await store.publishDeployment(first), 'published')
      t.equal(await store.publishDeployment(first), 'unchanged', 'the same name, version and content again: nothing to do')
      await t.rejects(store.publishDeployment({ ...first, contentHash: 'c2', operations: [users] }), { code: 'CONFLICT' })
      t.equal(await store.publishDeployment({ name: 'android', version: '7', contentHash: 'c3', operations: [users], maxWeight: 1e9 }), 'published')
      const rows = await store.deploymentOperations()
      t.same(rows.filter((r) => r.app === 'ios').map((r) => [r.name, r.clientId, r.state]).sort(),
        [['Me', 'relay-md5-id', 'active'], ['Users', null, 'active']])
      t.equal(rows.filter((r) => r.hash === users.hash).length, 2, 'an operation two apps ship is stored once, linked twice')

      await store.recordUsage([
        { app: 'ios', version: '1.0.0', hash: users.hash, requests: 3, lastUsedAt: '2026-03-01T00:00:00.000Z' },
        { app: 'ios', version: '1.0.0', hash: me.hash, requests: 2, lastUsedAt: '2026-02-01T00:00:00.000Z' }
      ])
      await store.recordUsage([{ app: 'ios', version: '1.0.0', hash: users.hash, requests: 1, lastUsedAt: '2026-01-01T00:00:00.000Z' }])
      const ios = (await store.listDeployments()).find((d) => d.name === 'ios')
      t.match(ios, { version: '1.0.0', state: 'active', operations: 2, requests: 6, lastUsedAt: '2026-03-01T00:00:00.000Z', retiredAt: null },
        'usage adds up; the latest use is kept when an older batch arrives late')

      t.equal(await store.retireDeployment('ios', '1.0.0'), true)
      t.equal(await store.retireDeployment('ios', '9.9.9'), false, 'an unknown version: nothing retired')
      const retired = (await store.listDeployments()).find((d) => d.name === 'ios')!
      t.equal(retired.state, 'retired')
      t.ok(retired.retiredAt)
      t.same((await store.deploymentOperations()).filter((r) => r.app === 'ios').map((r) => r.state), ['retired', 'retired'])
      t.same((await store.deploymentOperations([{ name: 'ios', version: '1.0.0' }])).map((r) => [r.app, r.body, r.weight]),
        [['ios', '', 1000], ['ios', '', 1000]], 'the operations of the deployments asked for; a retired one\'s bodies are not read')
      t.equal(await store.publishDeployment(first), 'published', 'the same content published again after retirement is back')
      t.match((await store.listDeployments()).find((d) => d.name === 'ios'), { state: 'active', retiredAt: null })
    })

    await t.test('app deployments: the weight bound is checked in the publish\'s transaction, publishes one at a time', async (t) => {
      const op = (body: string) =>
        ({ hash: createHash('sha256').update(body).digest('hex'), body, name: null, type: 'query', clientId: null, weight: 400 })
      const shared = op('query { me { id } }')
      for (const d of await store.listDeployments()) await store.retireDeployment(d.name, d.version)
      // 400 already active; each of these adds 400 (the shared operation counts once): one fits under 1000, not both.
      t.equal(await store.publishDeployment({ name: 'bound', version: 'base', contentHash: 'b0', operations: [shared], maxWeight: 1000 }), 'published')
      const outcomes = await Promise.allSettled(['a', 'b'].map((v) => store.publishDeployment({
        name: 'bound', version: v, contentHash: `b-${v}`, operations: [shared, op(`query ${v.toUpperCase()} { me { name } }`)], maxWeight: 1000
      })))
      t.same(outcomes.map((o) => o.status).sort(), ['fulfilled', 'rejected'], 'two publishes at once: one passes the bound, the other is refused')
      t.match(outcomes.find((o) => o.status === 'rejected'), { reason: { code: 'BAD_USER_INPUT', message: /would weigh 1200 bytes in memory, over DEPLOYMENTS_MAX_BYTES \(1000\)/ } })
      const bound = (await store.listDeployments()).filter((d) => d.name === 'bound')
      t.same(bound.map((d) => d.state), ['active', 'active'], 'the refused one left nothing behind, not even pending')
      await store.retireDeployment('bound', 'base')
      for (const d of bound) await store.retireDeployment(d.name, d.version)
      await t.rejects(store.publishDeployment({ name: 'bound', version: 'base', contentHash: 'b0', operations: [shared], maxWeight: 100 }),
        { code: 'BAD_USER_INPUT' }, 'a retired deployment published again is held to the bound too')
    })

    await t.test('answers ping', async (t) => {
      await t.resolves(store.ping())
    })
  })
}

test('postgres migrations are safe when two instances start at once', async (t) => {
  const schema = await freshSchema(t, 'migrate')
  const [a, b] = await Promise.all([
    openPostgresStore({ url: TEST_DATABASE_URL, poolSize: 2, schema }),
    openPostgresStore({ url: TEST_DATABASE_URL, poolSize: 2, schema })
  ])
  t.teardown(async () => { await a.close(); await b.close() })
  await a.createUser({ name: 'One', email: 'one@example.com' })
  t.equal(await b.countUsers(), 1)
})

test('sqlite store persists in its file across reopening', async (t) => {
  const dir = t.testdir()
  const path = `${dir}/nested/service.db`
  const first = openSqliteStore(path)
  await first.createUser({ id: 'u1', name: 'Kept', email: 'kept@example.com' })
  await first.close()
  const second = openSqliteStore(path)
  t.teardown(() => second.close())
  t.match(await second.usersByIds(['u1']), [{ name: 'Kept' }])
})

test('postgres: an unreachable database is SERVICE_UNAVAILABLE, and the store recovers when it returns', async (t) => {
  const relay = await postgresRelay(t)
  const store = await openPostgresStore({ url: relay.url, poolSize: 2, schema: await freshSchema(t, 'outage') })
  t.teardown(() => store.close())
  await store.createUser({ id: 'u1', name: 'Before', email: 'before@example.com' })

  relay.cut()
  await t.rejects(store.usersByIds(['u1']), {
    code: 'SERVICE_UNAVAILABLE',
    message: 'The database is unavailable; retry shortly'
  })
  await t.rejects(store.ping(), { code: 'SERVICE_UNAVAILABLE' })

  await relay.restore()
  t.match(await store.usersByIds(['u1']), [{ name: 'Before' }], 'recovered by itself')
})
