// What a request read, recorded by its store as read tags (app/core/domain/store-tags.ts): the response
// cache drops an answer when a write changes one of its tags, so every read must be recorded, through
// every domain reader, and nothing when nobody asks. Every read also carries its table's tag (what a change
// too wide to name row by row drops).
import { test } from 'tap'
import { createDomainContext, type DomainDeps } from '../../app/core/domain/context.ts'
import { listMessages, listMessagesPage } from '../../app/core/domain/messages.ts'
import { readTags, type ReadSet } from '../../app/core/domain/read-tags.ts'
import { getUser, getUsers, listUsers, listUsersPage } from '../../app/core/domain/users.ts'
import { openSqliteStore } from '../../app/core/store/sqlite.ts'

async function fixture () {
  const store = openSqliteStore(':memory:')
  const ann = await store.createUser({ name: 'Ann', email: 'ann@example.com' })
  const bob = await store.createUser({ name: 'Bob', email: 'bob@example.com' })
  await store.createMessage({ roomId: 'lobby', content: 'hi', authorId: ann.id })
  await store.createMessage({ roomId: 'lobby', content: 'yo', authorId: bob.id })
  const deps: DomainDeps = {
    store,
    events: { publish: async () => {} },
    caps: { maxStringLength: 1000, maxListLength: 100, maxPageSize: 100 },
    cursorKey: Buffer.alloc(32, 1)
  }
  const recording = () => {
    const reads: ReadSet = new Set()
    return { ctx: createDomainContext(deps, null, Infinity, reads), reads }
  }
  return { store, deps, ann, bob, recording }
}

test('a user read by id is recorded, found or not, alone or in a list of ids', async (t) => {
  const { ann, bob, recording } = await fixture()
  const { ctx, reads } = recording()
  t.equal((await getUser(ctx, ann.id))?.name, 'Ann')
  t.equal(await getUser(ctx, 'nobody'), null)
  await getUsers(ctx, [bob.id, ann.id])
  t.same([...reads].sort(), [readTags.user(ann.id), readTags.user(bob.id), readTags.user('nobody'), readTags.usersTable].sort())
})

test('a list or page of users is recorded as `users`, even when empty', async (t) => {
  const { recording } = await fixture()
  const list = [readTags.users, readTags.usersTable]
  const listed = recording()
  await listUsers(listed.ctx, 10)
  t.same([...listed.reads], list)
  const paged = recording()
  t.equal((await listUsersPage(paged.ctx, { first: 1 })).edges.length, 1)
  t.same([...paged.reads], list)
  const empty = recording()
  const last = (await listUsersPage(recording().ctx, { first: 5 })).pageInfo.endCursor
  const page = await listUsersPage(empty.ctx, { first: 1, after: last })
  t.equal(page.edges.length, 0, 'past the last user')
  t.same([...empty.reads], list, 'an empty page is recorded: a create fills it')
})

test('a listed user read again by id is answered from the list: `users` covers it (every user write changes it)', async (t) => {
  const { ann, recording } = await fixture()
  const { ctx, reads } = recording()
  await listUsers(ctx, 10)
  t.equal((await getUser(ctx, ann.id))?.name, 'Ann')
  t.same([...reads], [readTags.users, readTags.usersTable], 'no second read')
})

test("a room's messages are recorded with their authors, by list and by page", async (t) => {
  const { ann, bob, recording } = await fixture()
  const expected = [readTags.room('lobby'), readTags.messagesTable, readTags.user(ann.id), readTags.user(bob.id)].sort()
  const listed = recording()
  t.equal((await listMessages(listed.ctx, 'lobby', 10)).length, 2)
  t.same([...listed.reads].sort(), expected)
  const paged = recording()
  t.equal((await listMessagesPage(paged.ctx, 'lobby', { last: 10 })).edges.length, 2)
  t.same([...paged.reads].sort(), expected)
  const empty = recording()
  await listMessages(empty.ctx, 'empty-room', 10)
  await listMessagesPage(empty.ctx, 'other-room', {})
  t.same([...empty.reads].sort(), [readTags.room('empty-room'), readTags.room('other-room'), readTags.messagesTable].sort())
})

test('nothing is recorded when nobody asks', async (t) => {
  const { deps, ann } = await fixture()
  const ctx = createDomainContext(deps, null)
  t.equal(ctx.store, deps.store, 'the store itself: no recording')
  t.equal((await getUser(ctx, ann.id))?.name, 'Ann')
  t.equal((await listMessages(ctx, 'lobby', 10)).length, 2)
  t.equal((await listMessagesPage(ctx, 'lobby', {})).edges.length, 2)
})
