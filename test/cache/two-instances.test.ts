// The shared response cache through two real instances (processes) on one PostgreSQL schema and one
// Redis prefix, each addressed directly: a read cached on one is a hit on the other (Age), a 304 on
// the other comes from the shared entry without executing, every write (GraphQL or SOAP, on either
// instance) is seen by the next read on both, a user's e-mail reaches no other caller, and an expired
// token is refused however cached its answer is.
import { test, type Test } from 'tap'
import { randomBytes } from 'node:crypto'
import { setTimeout as sleep } from 'node:timers/promises'
import { createSigner } from 'fast-jwt'
import soap from 'soap'
import { createPartnerAccount } from '../../cli/create-partner.ts'
import { openPostgresStore } from '../../app/core/store/postgres.ts'
import {
  JWT_SECRET,
  PARTNER_SECRET_KEY,
  gql,
  newUser,
  startInstances,
  token,
  type Instance
} from '../cluster/harness.ts'
import { CACHE_TEST_ENV, ageOf, cacheCounters, counted, persistedGet } from './instances.ts'

const USER_NAME = 'query UserName($id: ID!) { user(id: $id) { id name } }'
const USER_NAMES = 'query UserNames { users(limit: 100) { id name } }'
const USER_EMAIL = 'query UserEmail($id: ID!) { user(id: $id) { id email } }'
const USER_EMAILS = 'query UserEmails { users(limit: 100) { id email } }'
const ROOM = 'query Room($roomId: String!) { messages(roomId: $roomId, limit: 50) { id content author { id name } } }'

/** Cost units per rate-limit window: a caller's first request leaves this less its cost. */
const COST_WINDOW = Number(CACHE_TEST_ENV.RATE_LIMIT_COST)
/** A SOAP partner of the test's own, bound to the administrator (user 1): it may delete users too. */
const ROOT_PARTNER = { login: 'root-partner', password: 'r00t-partner-s3cret' }

test('the response cache shared by two instances', async (t) => {
  const { instances, db } = await startInstances(t, { env: CACHE_TEST_ENV })
  const [a, b] = instances as [Instance, Instance]
  t.comment(`instances ${a.url} ${b.url}, schema ${db.schema}`)
  const partnerStore = await openPostgresStore({ url: db.url, poolSize: 1, schema: db.schema })
  await createPartnerAccount(partnerStore, PARTNER_SECRET_KEY, { ...ROOT_PARTNER, userId: '1' })
  await partnerStore.close()
  // An administrator's token of the test's own: its cost window is fresh.
  const admin = token(`cache-admin-${randomBytes(3).toString('hex')}`, 'ADMIN')

  await t.test('a repeated read is a hit on the same instance and on the other; the first executes', async (t) => {
    const id = await newUser(a.url, 'repeat')
    const before = await Promise.all([cacheCounters(a), cacheCounters(b)])
    const started = Date.now()
    const first = await gql(a.url, USER_NAME, { id }, { token: admin })
    const again = await gql(a.url, USER_NAME, { id }, { token: admin })
    const other = await gql(b.url, USER_NAME, { id }, { token: admin })
    const after = await Promise.all([cacheCounters(a), cacheCounters(b)])
    for (const response of [first, again, other]) {
      t.equal(response.status, 200)
      t.same(response.body.data, first.body.data)
    }
    t.equal(ageOf(first), undefined, 'the first read executed: no Age')
    t.match(ageOf(again), /^\d+$/, 'a hit on the same instance: Age in whole seconds')
    t.match(ageOf(other), /^\d+$/, 'a hit on the other instance')
    t.same(counted(before[0], after[0]), { hits: 1, misses: 1, invalidations: 0 }, 'instance a: one miss, one hit')
    t.same(counted(before[1], after[1]), { hits: 1, misses: 0, invalidations: 0 }, 'instance b: one hit')
    // A hit is charged like an execution, and reports its own cost window.
    const remaining = [first, again, other].map((r) => r.body.extensions.cost.remaining as number)
    const requested = first.body.extensions.cost.requested as number
    t.ok(requested > 0)
    // (What is left is as the answering instance knows it: its own share of the window counts as left,
    // the other's as spent: docs/guarantees.md, budgets across instances.)
    t.equal(remaining[1], remaining[0]! - requested, 'each hit spends the operation\'s cost and reports what is left after it')
    t.ok(remaining[2]! <= remaining[1]! - requested, 'on the other instance too')
    const requestsLeft = [first, again, other].map((r) => Number(r.headers['x-ratelimit-remaining']))
    t.equal(requestsLeft[1], requestsLeft[0]! - 1, 'and counts in the request budget')
    t.ok(requestsLeft[2]! <= requestsLeft[1]! - 1)
    // Another caller (a fresh window of its own) is served the same shared entry, with its own cost report.
    const stranger = await gql(b.url, USER_NAME, { id }, { token: token(`stranger-${randomBytes(3).toString('hex')}`) })
    t.match(ageOf(stranger), /^\d+$/, 'the answer selects no guarded field: one entry for every caller')
    t.same(stranger.body.extensions.cost.remaining, COST_WINDOW - requested, 'the stranger\'s own window, not the administrator\'s')
    // Age counts whole seconds from when the answer was computed.
    await sleep(1100)
    const later = Number(ageOf(await gql(b.url, USER_NAME, { id }, { token: admin })))
    t.ok(later >= 1 && later <= Math.floor((Date.now() - started) / 1000), `Age ${later} s, a second later`)

    const get = await persistedGet(a.url, 'UserById', { id })
    const getOther = await persistedGet(b.url, 'UserById', { id })
    t.equal(get.status, 200)
    t.equal(ageOf(get), undefined, 'a persisted GET executes first')
    t.equal(getOther.status, 200)
    t.match(ageOf(getOther), /^\d+$/, 'and is a hit on the other instance')
    t.same(getOther.json().data, get.json().data)
    t.same(Object.keys(getOther.json().extensions.cost).sort(), ['budget', 'requested'],
      'a GET hit reports the cost without the window (as an executed GET does)')
  })

  await t.test('If-None-Match on the other instance: 304 from the shared entry, without executing', async (t) => {
    const id = await newUser(a.url, 'etag')
    const first = await persistedGet(a.url, 'UserById', { id })
    t.equal(first.status, 200)
    const etag = first.headers.etag as string
    t.ok(etag, 'the answer carries an ETag')
    const before = await cacheCounters(b)
    const revalidated = await persistedGet(b.url, 'UserById', { id }, { 'if-none-match': etag })
    const after = await cacheCounters(b)
    t.equal(revalidated.status, 304)
    t.equal(revalidated.text, '', 'no body')
    t.equal(revalidated.headers.etag, etag)
    t.same(counted(before, after), { hits: 1, misses: 0, invalidations: 0 }, 'answered from the shared entry: no miss, so nothing executed')
  })

  await t.test('mutations, introspection and answers with errors are never served from the cache', async (t) => {
    const id = await newUser(a.url, 'uncached')
    const uncached: [string, Record<string, unknown>, string | undefined][] = [
      ['mutation ($id: ID!) { updateUser(id: $id, input: { name: "Same Name" }) { id name } }', { id }, admin],
      ['{ __schema { queryType { name } } }', {}, admin],
      ['{ __type(name: "User") { fields { name } } }', {}, undefined],
      ['query ($id: ID!) { user(id: $id) { id email } }', { id }, undefined],
      ['query ($id: ID!) { user(id: $id) { id adminNotes } }', { id }, token(id)],
      ['{ users(limit: 100000) { id } }', {}, admin]
    ]
    for (const [query, variables, bearer] of uncached) {
      for (const instance of [a, b, a]) {
        const response = await gql(instance.url, query, variables, { token: bearer })
        t.equal(ageOf(response), undefined, `${query} on ${instance.name}`)
      }
    }
  })

  /** Reads `query` on `first` then on `second`: both see `expected`. */
  const seenOnBoth = async (
    t: Test,
    what: string,
    query: string,
    variables: Record<string, unknown>,
    expected: (data: any) => boolean,
    [first, second]: [Instance, Instance] = [b, a]
  ) => {
    for (const instance of [first, second]) {
      const response = await gql(instance.url, query, variables, { token: admin })
      t.ok(expected(response.body.data), `${what} on ${instance.name}`, { data: response.body.data })
    }
  }
  /** Reads `query` until both instances serve it from the cache: a write that does not invalidate is seen stale. */
  const cachedOnBoth = async (t: Test, query: string, variables: Record<string, unknown> = {}) => {
    await gql(a.url, query, variables, { token: admin })
    for (const instance of [a, b]) {
      const response = await gql(instance.url, query, variables, { token: admin })
      t.match(ageOf(response), /^\d+$/, `cached, as ${instance.name} serves it`)
    }
  }
  const names = (data: any) =>
    new Map<string, string>(data.users.map((u: { id: string; name: string }) => [u.id, u.name]))

  await t.test('a GraphQL write is seen by the next read on both instances, the users list included', async (t) => {
    await cachedOnBoth(t, USER_NAMES)
    const created = await gql(a.url, 'mutation ($input: CreateUserInput!) { createUser(input: $input) { id } }',
      { input: { name: 'Made On A', email: `made.${randomBytes(3).toString('hex')}@example.com` } }, { token: admin })
    const id = created.body.data.createUser.id as string
    await seenOnBoth(t, 'createUser: the list shows the new user', USER_NAMES, {}, (d) => names(d).get(id) === 'Made On A')

    await cachedOnBoth(t, USER_NAME, { id })
    await cachedOnBoth(t, USER_NAMES)
    const before = await Promise.all([cacheCounters(a), cacheCounters(b)])
    const updated = await gql(a.url, 'mutation ($id: ID!) { updateUser(id: $id, input: { name: "Renamed On A" }) { id } }',
      { id }, { token: admin })
    t.equal(updated.body.data.updateUser.id, id)
    const after = await Promise.all([cacheCounters(a), cacheCounters(b)])
    t.same([counted(before[0], after[0]).invalidations, counted(before[1], after[1]).invalidations], [2, 0],
      'the write\'s two invalidations (before and after storing), counted by the instance that wrote')
    await seenOnBoth(t, 'updateUser: the user', USER_NAME, { id }, (d) => d.user.name === 'Renamed On A')
    await seenOnBoth(t, 'updateUser: the list', USER_NAMES, {}, (d) => names(d).get(id) === 'Renamed On A', [a, b])

    // A client holding the ETag of the old answer gets the new one (200), not a 304, on either instance.
    const etags = new Map<string, string>()
    for (const operation of ['UserById', 'Users']) {
      const variables = operation === 'Users' ? { limit: 100 } : { id }
      await persistedGet(a.url, operation, variables)
      const cached = await persistedGet(b.url, operation, variables)
      t.match(ageOf(cached), /^\d+$/, `${operation} cached`)
      etags.set(operation, cached.headers.etag as string)
    }
    await gql(a.url, 'mutation ($id: ID!) { updateUser(id: $id, input: { name: "Renamed Again" }) { id } }', { id }, { token: admin })
    for (const instance of [b, a]) {
      const one = await persistedGet(instance.url, 'UserById', { id }, { 'if-none-match': etags.get('UserById')! })
      t.equal(one.status, 200, `UserById with the old ETag on ${instance.name}`)
      if (one.status === 200) t.equal(one.json().data.user.name, 'Renamed Again')
      const all = await persistedGet(instance.url, 'Users', { limit: 100 }, { 'if-none-match': etags.get('Users')! })
      t.equal(all.status, 200, `Users with the old ETag on ${instance.name}`)
      if (all.status === 200) t.equal(names(all.json().data).get(id), 'Renamed Again')
    }

    await cachedOnBoth(t, USER_NAME, { id })
    await cachedOnBoth(t, USER_NAMES)
    const deleted = await gql(b.url, 'mutation ($id: ID!) { deleteUser(id: $id) }', { id }, { token: admin })
    t.equal(deleted.body.data.deleteUser, true)
    await seenOnBoth(t, 'deleteUser: the user', USER_NAME, { id }, (d) => d.user === null, [a, b])
    await seenOnBoth(t, 'deleteUser: the list', USER_NAMES, {}, (d) => !names(d).has(id))

    const roomId = `room-${randomBytes(3).toString('hex')}`
    const author = await newUser(a.url, 'author')
    await cachedOnBoth(t, ROOM, { roomId })
    const posted = await gql(b.url, 'mutation ($roomId: String!) { postMessage(roomId: $roomId, content: "fresh") { id } }',
      { roomId }, { token: token(author) })
    const messageId = posted.body.data.postMessage.id as string
    t.ok(messageId)
    await seenOnBoth(t, 'postMessage: the room', ROOM, { roomId },
      (d) => d.messages.some((m: { id: string; content: string }) => m.id === messageId && m.content === 'fresh'), [a, b])
  })

  await t.test('a SOAP write is seen by the next read on both instances, the users list included', async (t) => {
    // A real SOAP client (the soap package, as partners use), on each instance's own endpoint.
    const clientOf = async (instance: Instance) => {
      const client = await soap.createClientAsync(`${instance.url}/v1/UserService?wsdl`, {}, `${instance.url}/v1/UserService`)
      client.setSecurity(new soap.WSSecurity(ROOT_PARTNER.login, ROOT_PARTNER.password, { passwordType: 'PasswordText', hasTimeStamp: true }))
      return client as unknown as Record<string, (args: unknown) => Promise<[any]>>
    }
    const [overA, overB] = [await clientOf(a), await clientOf(b)]

    await cachedOnBoth(t, USER_NAMES)
    const [created] = await overB.CreateUserAsync!({ name: 'Made Over Soap', email: `soap.${randomBytes(3).toString('hex')}@example.com` })
    const id = created.user.id as string
    await seenOnBoth(t, 'SOAP CreateUser: the list shows the new user', USER_NAMES, {}, (d) => names(d).get(id) === 'Made Over Soap', [a, b])

    await cachedOnBoth(t, USER_NAME, { id })
    await cachedOnBoth(t, USER_NAMES)
    await overA.UpdateUserAsync!({ id, name: 'Renamed Over Soap' })
    await seenOnBoth(t, 'SOAP UpdateUser: the user', USER_NAME, { id }, (d) => d.user.name === 'Renamed Over Soap')
    await seenOnBoth(t, 'SOAP UpdateUser: the list', USER_NAMES, {}, (d) => names(d).get(id) === 'Renamed Over Soap', [a, b])

    await cachedOnBoth(t, USER_NAME, { id })
    await cachedOnBoth(t, USER_NAMES)
    const [deleted] = await overB.DeleteUserAsync!({ id })
    t.equal(String(deleted.deleted), 'true')
    await seenOnBoth(t, 'SOAP DeleteUser: the user', USER_NAME, { id }, (d) => d.user === null, [a, b])
    await seenOnBoth(t, 'SOAP DeleteUser: the list', USER_NAMES, {}, (d) => !names(d).has(id))
  })

  await t.test('a user\'s e-mail reaches only them and administrators, whoever reads first and wherever', async (t) => {
    const other = await newUser(a.url, 'other')
    type Reader = 'owner' | 'admin' | 'other' | 'anonymous'
    const orders: Reader[][] = [
      ['owner', 'other', 'anonymous', 'admin'],
      ['admin', 'anonymous', 'other', 'owner'],
      ['other', 'owner', 'admin', 'anonymous'],
      ['anonymous', 'admin', 'owner', 'other']
    ]
    for (const order of orders) {
      // An owner of each order's own, so that whoever reads first is the first to read them.
      const owner = await newUser(a.url, 'owner')
      const own = await gql(a.url, USER_EMAIL, { id: owner }, { token: token(owner) })
      const email = own.body.data.user.email as string
      t.ok(email, 'the owner reads their own e-mail')
      const tokens: Record<Reader, string | undefined> = {
        owner: token(owner),
        admin: token(`email-admin-${randomBytes(3).toString('hex')}`, 'ADMIN'),
        other: token(other),
        anonymous: undefined
      }
      const entitled = (reader: Reader) => reader === 'owner' || reader === 'admin'
      // Each reader reads twice on each instance, alternating which one starts (a hit on the second).
      for (const [index, reader] of order.entries()) {
        const pair = index % 2 === 0 ? [a, b] : [b, a]
        for (const instance of [...pair, ...pair]) {
          for (const [query, variables] of [[USER_EMAIL, { id: owner }], [USER_EMAILS, {}]] as const) {
            const response = await gql(instance.url, query, variables, { token: tokens[reader] })
            const label = `${order.join(' > ')}: ${reader} on ${instance.name}, ${query.split(' ')[1]}`
            const text = JSON.stringify(response.body)
            if (entitled(reader)) {
              t.ok(text.includes(email), `${label} sees the e-mail`)
            } else {
              t.notOk(text.includes(email), `${label} does not`)
              t.equal(response.body.data?.user?.email ?? null, null, label)
              t.equal(ageOf(response), undefined, `${label}: an answer with errors is never a hit`)
            }
          }
          const get = await persistedGet(instance.url, 'UserEmail', { id: owner },
            tokens[reader] ? { authorization: `Bearer ${tokens[reader]}` } : {})
          t.equal(get.text.includes(email), entitled(reader), `${reader} on ${instance.name}, persisted GET`)
        }
      }
      // The cache took part: the owner's answer is served from the owner's entry on either instance.
      for (const instance of [a, b]) {
        t.match(ageOf(await gql(instance.url, USER_EMAIL, { id: owner }, { token: tokens.owner })), /^\d+$/,
          `the owner's answer is cached (${instance.name})`)
      }
    }
  })

  await t.test('an expired token is refused (401) even though its answer is cached', async (t) => {
    const owner = await newUser(a.url, 'expiring')
    const valid = token(owner)
    const now = Math.floor(Date.now() / 1000)
    const expired = createSigner({ key: JWT_SECRET, algorithm: 'HS256' })({ sub: owner, role: 'USER', iat: now - 7200, exp: now - 3600 })
    for (const instance of [a, b, a]) await gql(instance.url, USER_EMAIL, { id: owner }, { token: valid })
    await persistedGet(a.url, 'UserById', { id: owner })
    for (const instance of [a, b]) {
      const cached = await gql(instance.url, USER_EMAIL, { id: owner }, { token: valid })
      t.match(ageOf(cached), /^\d+$/, `the owner's answer is cached (${instance.name})`)
      t.match(ageOf(await persistedGet(instance.url, 'UserById', { id: owner })), /^\d+$/,
        `the shared persisted answer is cached (${instance.name})`)

      const refused = await gql(instance.url, USER_EMAIL, { id: owner }, { token: expired })
      t.equal(refused.status, 401, `POST with an expired token on ${instance.name}`)
      t.equal(refused.body.errors[0].extensions.code, 'UNAUTHENTICATED')
      t.equal(refused.body.data, undefined, 'no data')
      t.equal(ageOf(refused), undefined)
      for (const operation of ['UserEmail', 'UserById']) {
        const get = await persistedGet(instance.url, operation, { id: owner }, { authorization: `Bearer ${expired}` })
        t.equal(get.status, 401, `persisted GET ${operation} with an expired token on ${instance.name}`)
        t.equal(get.json().errors[0].extensions.code, 'UNAUTHENTICATED')
        t.notOk(get.text.includes('"data"'))
      }
    }
  })
})
