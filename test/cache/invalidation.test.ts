// Every write tells the invalidation port exactly the read tags it changes, before storing (so a cache
// that cannot be told refuses the write with nothing changed) and after storing, before it answers,
// whatever carries it: the domain calls (unit), a GraphQL mutation and SOAP CreateUser,
// UpdateUser and DeleteUser through real clients on a listening server.
import { test } from 'tap'
import soap from 'soap'
import { createPartnerAccount } from '../../cli/create-partner.ts'
import { mintToken } from '../../cli/mint-token.ts'
import { createDomainContext, type Caller, type DomainDeps } from '../../app/core/domain/context.ts'
import { postMessage } from '../../app/core/domain/messages.ts'
import { readTags } from '../../app/core/domain/read-tags.ts'
import { tellingChanges, type Invalidation } from '../../app/core/domain/store-tags.ts'
import { createUser, deleteUser, updateUser } from '../../app/core/domain/users.ts'
import { openSqliteStore } from '../../app/core/store/sqlite.ts'
import type { Store } from '../../app/core/store/types.ts'
import { gql } from '../helpers/app.ts'
import { listenSoapApp } from '../soap/helpers.ts'

/**
 * A port that records each invalidation and settles it only after a delay: a write that does not wait
 * for it answers while it is still pending. `seen` reads the store at invalidation time (the write must
 * already be stored, or a read racing the invalidation would be cached stale again).
 */
function recordingPort (seen: (tags: readonly string[]) => Promise<unknown> = async () => null) {
  const calls: { tags: string[]; settled: boolean; seen: unknown }[] = []
  const port: Invalidation = {
    async invalidate (tags) {
      const call = { tags: [...tags].sort(), settled: false, seen: await seen(tags) }
      calls.push(call)
      await new Promise((resolve) => setTimeout(resolve, 20))
      call.settled = true
    }
  }
  return { port, calls }
}

const admin: Caller = { id: 'admin', role: 'ADMIN' }

function domain (store: Store, invalidation: Invalidation): DomainDeps {
  return {
    store: tellingChanges(store, invalidation),
    events: { publish: async () => {} },
    caps: { maxStringLength: 1000, maxListLength: 100, maxPageSize: 100 },
    cursorKey: Buffer.alloc(32, 1)
  }
}

test('each domain write invalidates exactly its tags, once stored and before it returns', async (t) => {
  const store = openSqliteStore(':memory:')
  t.teardown(() => store.close())
  const { port, calls } = recordingPort(async (tags) => {
    const id = tags.find((tag) => tag.startsWith('user:'))?.slice('user:'.length)
    return id ? (await store.usersByIds([id]))[0]?.name ?? 'gone' : null
  })
  const deps = domain(store, port)
  const ctx = (caller: Caller | null = admin) => createDomainContext(deps, caller)

  const ann = await createUser(ctx(), { name: 'Ann', email: 'ann@example.com' })
  t.same(calls.at(-1), { tags: [readTags.user(ann.id), readTags.users].sort(), settled: true, seen: 'Ann' }, 'createUser')

  await updateUser(ctx(), ann.id, { name: 'Anne' })
  t.same(calls.at(-1), { tags: [readTags.user(ann.id), readTags.users].sort(), settled: true, seen: 'Anne' }, 'updateUser')

  await postMessage(ctx({ id: ann.id, role: 'USER' }), 'lobby', 'hello')
  t.same(calls.at(-1), { tags: [readTags.room('lobby')], settled: true, seen: null }, 'postMessage')

  t.equal(await deleteUser(ctx(), ann.id), true)
  t.same(calls.at(-1), { tags: [readTags.user(ann.id), readTags.users, readTags.room('lobby')].sort(), settled: true, seen: 'gone' },
    'deleteUser: with the rooms their messages were deleted from')

  let before = calls.length
  await t.rejects(createUser(ctx(null), { name: 'x', email: 'x@example.com' }), { code: 'UNAUTHENTICATED' })
  await t.rejects(createUser(ctx(), { name: 'x', email: 'not an address' }), { code: 'BAD_USER_INPUT' })
  t.equal(calls.length, before, 'a write refused before the store is reached invalidates nothing')
  before = calls.length
  t.equal(await deleteUser(ctx(), ann.id), false)
  await t.rejects(updateUser(ctx(), 'nobody', { name: 'x' }), { code: 'NOT_FOUND' })
  t.equal(calls.length, before + 2, 'a write of a missing row: told before only (the store alone knows it is missing)')
})

test('a failed invalidation fails the write: refused with nothing changed, or, lost after storing, never acknowledged', async (t) => {
  const store = openSqliteStore(':memory:')
  t.teardown(() => store.close())
  const down = domain(store, { invalidate: async () => { throw new Error('Redis is down') } })
  await t.rejects(createUser(createDomainContext(down, admin), { name: 'Ann', email: 'ann@example.com' }), {
    code: 'SERVICE_UNAVAILABLE', message: 'Nothing was changed: the response cache is unavailable; retry shortly'
  })
  t.same(await store.listUsers(10), [], 'nothing changed')
  let calls = 0
  const lost = domain(store, { invalidate: async () => { if (++calls > 1) throw new Error('Redis is down') } })
  await t.rejects(createUser(createDomainContext(lost, admin), { name: 'Ann', email: 'ann@example.com' }), {
    code: 'SERVICE_UNAVAILABLE', message: /^The change was made, but the response cache could not be told of it/
  })
  t.equal((await store.listUsers(10)).length, 1, 'stored, but the caller was not told it succeeded')
})

test('GraphQL mutations and SOAP writes invalidate their tags before their answer is sent', async (t) => {
  const { port, calls } = recordingPort()
  const { app, url, store, partnerSecretKey } = await listenSoapApp(t, {}, { invalidation: port })
  await createPartnerAccount(store, partnerSecretKey, { login: 'root', password: 'r00t-secret', userId: '1' })
  const last = () => calls.at(-1)

  const bearer = { authorization: `Bearer ${mintToken(app.config.jwt, '1', 'ADMIN')}` }
  const created = await gql(url, 'mutation { createUser(input: { name: "Gina", email: "gina@example.com" }) { id } }', {}, bearer)
  const gina = created.body.data.createUser.id as string
  t.same(last(), { tags: [readTags.user(gina), readTags.users].sort(), settled: true, seen: null }, 'GraphQL createUser')
  await gql(url, 'mutation ($id: ID!) { updateUser(id: $id, input: { name: "Ginny" }) { id } }', { id: gina }, bearer)
  t.same(last(), { tags: [readTags.user(gina), readTags.users].sort(), settled: true, seen: null }, 'GraphQL updateUser')
  const asUser = { authorization: `Bearer ${mintToken(app.config.jwt, '2', 'USER')}` }
  const posted = await gql(url, 'mutation { postMessage(roomId: "r1", content: "hi") { id } }', {}, asUser)
  t.ok(posted.body.data.postMessage.id)
  t.same(last(), { tags: [readTags.room('r1')], settled: true, seen: null }, 'GraphQL postMessage')

  const client = await soap.createClientAsync(`${url}/v1/UserService?wsdl`, {}, `${url}/v1/UserService`)
  client.setSecurity(new soap.WSSecurity('root', 'r00t-secret', { passwordType: 'PasswordText', hasTimeStamp: true }))
  const call = client as unknown as Record<string, (args: unknown) => Promise<[any]>>
  const [soapCreated] = await call.CreateUserAsync!({ name: 'Sam', email: 'sam@example.com' })
  const sam = soapCreated.user.id as string
  t.same(last(), { tags: [readTags.user(sam), readTags.users].sort(), settled: true, seen: null }, 'SOAP CreateUser')
  await call.UpdateUserAsync!({ id: sam, name: 'Samuel' })
  t.same(last(), { tags: [readTags.user(sam), readTags.users].sort(), settled: true, seen: null }, 'SOAP UpdateUser')
  await call.DeleteUserAsync!({ id: sam })
  t.same(last(), { tags: [readTags.user(sam), readTags.users].sort(), settled: true, seen: null }, 'SOAP DeleteUser')
  t.equal(calls.length, 12, 'two invalidations per write (before and after storing), none for reads')
})
