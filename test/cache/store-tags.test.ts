// Every store call declares what it reads and changes (app/core/domain/store-tags.ts), and the wrappers built
// from the declarations are the only place writes tell the cache and reads are recorded: a method
// without a declaration is refused, a write's cascade is named, and a page's look-ahead row is recorded.
import { test } from 'tap'
import { createDomainContext, type DomainDeps } from '../../app/core/domain/context.ts'
import { listMessagesPage } from '../../app/core/domain/messages.ts'
import { readTags, type ReadSet } from '../../app/core/domain/read-tags.ts'
import { assertDeclared, recordingReads, storeTags, tellingChanges, type Invalidation } from '../../app/core/domain/store-tags.ts'
import { openPostgresStore } from '../../app/core/store/postgres.ts'
import { openSqliteStore } from '../../app/core/store/sqlite.ts'
import type { Store } from '../../app/core/store/types.ts'
import { TEST_DATABASE_URL, freshSchema } from '../helpers/postgres.ts'

function recordingPort () {
  const calls: string[][] = []
  const port: Invalidation = { invalidate: async (tags) => { calls.push([...tags].sort()) } }
  return { port, calls }
}

test('every method of both stores is declared, and nothing else is', async (t) => {
  const sqlite = openSqliteStore(':memory:')
  t.teardown(() => sqlite.close())
  const postgres = await openPostgresStore({ url: TEST_DATABASE_URL, poolSize: 1, schema: await freshSchema(t, 'store_tags') })
  t.teardown(() => postgres.close())
  for (const store of [sqlite, postgres]) {
    const methods = Object.keys(store).filter((name) => typeof store[name as keyof Store] === 'function').sort()
    t.same(methods, Object.keys(storeTags).sort(), `${store.kind}: one declaration per method`)
    t.doesNotThrow(() => assertDeclared(store))
  }
})

test('a store method that declares nothing is refused when the service builds its store', async (t) => {
  const store = openSqliteStore(':memory:')
  t.teardown(() => store.close())
  const withNewWrite = { ...store, renameRoom: async () => {} } as Store
  t.throws(() => tellingChanges(withNewWrite, recordingPort().port), {
    message: /^Store method renameRoom declares neither what it reads nor what it changes/
  })
  t.throws(() => tellingChanges(withNewWrite, undefined), /renameRoom/, 'with the cache off too: the rule is the code\'s, not the setting\'s')
})

test('a write that changes a user changes the lists of users too (what `users` promises its readers)', async (t) => {
  const store = openSqliteStore(':memory:')
  t.teardown(() => store.close())
  const { port, calls } = recordingPort()
  const telling = tellingChanges(store, port)
  const ann = await telling.createUser({ name: 'Ann', email: 'ann@example.com' })
  await telling.insertUsers([{ name: 'Bob', email: 'bob@example.com' }])
  await telling.updateUser(ann.id, { name: 'Anne' })
  await telling.createMessage({ roomId: 'lobby', content: 'hi', authorId: ann.id })
  await telling.deleteUser(ann.id)
  const touchingUsers = calls.filter((tags) => tags.some((tag) => tag.startsWith('user:')))
  t.equal(touchingUsers.length, 6, 'after a create and an insert; before and after an update and a delete')
  for (const tags of touchingUsers) t.ok(tags.includes(readTags.users), `${tags.join(' ')} includes users`)
  t.same(calls.at(-1), [readTags.room('lobby'), readTags.user(ann.id), readTags.users].sort(),
    'deleting a user names the rooms their messages were deleted from (the cascade)')
})

test("a page records every row it read: the look-ahead row's author too", async (t) => {
  const store = openSqliteStore(':memory:')
  t.teardown(() => store.close())
  const ann = await store.createUser({ name: 'Ann', email: 'ann@example.com' })
  const victim = await store.createUser({ name: 'Vic', email: 'vic@example.com' })
  await store.createMessage({ roomId: 'r', content: '1', authorId: ann.id, createdAt: '2026-01-01T00:00:01.000Z' })
  await store.createMessage({ roomId: 'r', content: '2', authorId: ann.id, createdAt: '2026-01-01T00:00:02.000Z' })
  await store.createMessage({ roomId: 'r', content: '3', authorId: victim.id, createdAt: '2026-01-01T00:00:03.000Z' })
  const deps: DomainDeps = {
    store,
    events: { publish: async () => {} },
    caps: { maxStringLength: 1000, maxListLength: 100, maxPageSize: 100 },
    cursorKey: Buffer.alloc(32, 1)
  }
  const reads: ReadSet = new Set()
  const page = await listMessagesPage(createDomainContext(deps, null, Infinity, reads), 'r', { first: 2 })
  t.same(page.edges.map((edge) => edge.node.authorId), [ann.id, ann.id], 'the page shows Ann only')
  t.equal(page.pageInfo.hasNextPage, true, 'because of the row read ahead')
  t.ok(reads.has(readTags.user(victim.id)), 'the author of the row read ahead is recorded')
  const backwards: ReadSet = new Set()
  const last = await listMessagesPage(createDomainContext(deps, null, Infinity, backwards), 'r', { last: 1 })
  t.equal(last.pageInfo.hasPreviousPage, true)
  t.ok(backwards.has(readTags.user(ann.id)), 'backwards as well')
})

test('a recording store records reads only, and passes writes through as they are', async (t) => {
  const store = openSqliteStore(':memory:')
  t.teardown(() => store.close())
  const reads: ReadSet = new Set()
  const recording = recordingReads(store, reads)
  t.equal(recording.kind, 'sqlite')
  const ann = await recording.createUser({ name: 'Ann', email: 'ann@example.com' })
  t.same([...reads], [], 'a write records nothing')
  await recording.usersByIds([ann.id, 'missing'])
  await recording.countUsers()
  t.same([...reads].sort(), [readTags.user(ann.id), readTags.user('missing'), readTags.users, readTags.usersTable].sort())
})
