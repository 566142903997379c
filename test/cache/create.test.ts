// The composition root's calls (createResponseCache over either store), and the cache as the domain's
// invalidation port: an answer computed through the domain carries the tags its loaders recorded, and a
// domain write drops it.
import t0, { test } from 'tap'
import { randomUUID } from 'node:crypto'
import { Redis } from 'ioredis'
import { createResponseCache, memoryCacheStore, redisCacheStore, type ResponseCacheSettings } from '../../app/core/cache/create.ts'
import { type ResponseCache } from '../../app/core/cache/response-cache.ts'
import { createDomainContext, type DomainDeps } from '../../app/core/domain/context.ts'
import { tellingChanges } from '../../app/core/domain/store-tags.ts'
import { listMessages, postMessage } from '../../app/core/domain/messages.ts'
import type { ReadSet } from '../../app/core/domain/read-tags.ts'
import { createUser, deleteUser, getUser, listUsers, updateUser } from '../../app/core/domain/users.ts'
import { openSqliteStore } from '../../app/core/store/sqlite.ts'
import { testConfig } from '../helpers/app.ts'

const REDIS_URL = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379'
const prefix = `test-response-cache-create-${randomUUID()}:`
const redis = new Redis(REDIS_URL, { maxRetriesPerRequest: 1, commandTimeout: 2000 })
/** The embedded default: no Redis, the cache in process. */
const local = (settings: ResponseCacheSettings) => createResponseCache(settings, memoryCacheStore(settings))
/** The settings as the service reads them by default. */
const DEFAULTS = testConfig().responseCache
t0.teardown(async () => {
  const keys = await redis.keys(`${prefix}*`)
  if (keys.length > 0) await redis.del(...keys)
  await redis.quit()
})

test('in process (bounded in bytes), or on Redis (shared)', async (t) => {
  const small = local({ ...DEFAULTS, maxBytes: 2000 })
  await small.fill('big', async () => ({ body: JSON.stringify('x'.repeat(5000)), tags: [], store: true }))
  t.equal(await small.lookup('big'), null, 'the byte bound applies')
  t.equal(small.stats().bytes, 0)
  const shared = { cache: { client: redis, cluster: false, mayEvict: false }, key: (name: string) => prefix + name }
  const one = createResponseCache(DEFAULTS, redisCacheStore(DEFAULTS, shared))
  const two = createResponseCache(DEFAULTS, redisCacheStore(DEFAULTS, shared))
  await one.fill('k', async () => ({ body: '{"data":1}', tags: ['users'], store: true }))
  t.equal((await two.lookup('k'))?.body, '{"data":1}')
  t.equal(two.stats().bytes, null)
})

test('answers computed through the domain are dropped by the domain writes that change them', async (t) => {
  const store = openSqliteStore(':memory:')
  t.teardown(() => store.close())
  const cache = local(DEFAULTS)
  const deps: DomainDeps = {
    store: tellingChanges(store, cache),
    events: { publish: async () => {} },
    caps: { maxStringLength: 1000, maxListLength: 100, maxPageSize: 100 },
    cursorKey: Buffer.alloc(32, 1)
  }
  const admin = createDomainContext(deps, { id: 'admin', role: 'ADMIN' })
  const ann = await createUser(admin, { name: 'Ann', email: 'ann@example.com' })
  await postMessage(createDomainContext(deps, { id: ann.id, role: 'USER' }), 'lobby', 'hi')

  /** Reads through a recording domain context, as the GraphQL path will, and keeps the answer. */
  type Reader = (ctx: ReturnType<typeof createDomainContext>) => Promise<unknown>
  const read = (c: ResponseCache, key: string, run: Reader) =>
    c.fill(key, async () => {
      const reads: ReadSet = new Set()
      const body = JSON.stringify({ data: await run(createDomainContext(deps, null, Infinity, reads)) })
      return { body, tags: reads, store: true }
    })
  const readAll = async () => {
    await read(cache, 'ann', (ctx) => getUser(ctx, ann.id))
    await read(cache, 'nobody', (ctx) => getUser(ctx, 'later'))
    await read(cache, 'list', (ctx) => listUsers(ctx, 10))
    await read(cache, 'lobby', (ctx) => listMessages(ctx, 'lobby', 10))
    await read(cache, 'other-room', (ctx) => listMessages(ctx, 'other', 10))
  }
  const held = async () => {
    const keys = []
    for (const key of ['ann', 'nobody', 'list', 'lobby', 'other-room']) if (await cache.lookup(key)) keys.push(key)
    return keys
  }
  await readAll()
  t.same(await held(), ['ann', 'nobody', 'list', 'lobby', 'other-room'])
  await updateUser(admin, ann.id, { name: 'Anne' })
  t.same(await held(), ['nobody', 'other-room'], 'an update: the user, the lists, and the room showing their message')
  await readAll()
  await postMessage(createDomainContext(deps, { id: ann.id, role: 'USER' }), 'lobby', 'again')
  t.same(await held(), ['ann', 'nobody', 'list', 'other-room'], 'a post: its room')
  await readAll()
  await deleteUser(admin, ann.id)
  t.same(await held(), ['nobody', 'other-room'], 'a delete: the user, the lists and the rooms they wrote in')
  await readAll()
  t.equal(JSON.parse((await cache.lookup('lobby'))!.body).data.length, 0, 'their messages went with them')
})
