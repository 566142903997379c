// The per-request user loader and the rows a request has already read (app/core/domain/loaders.ts): a listed
// user is answered from the list, never read again; a deleted one is read again (and found gone).
import { test } from 'tap'
import { createLoaders } from '../app/core/domain/loaders.ts'
import type { Store, UserRow } from '../app/core/store/types.ts'

const row = (id: string, name = `User ${id}`): UserRow =>
  ({ id, name, email: `${id}@example.com`, adminNotes: null, role: 'USER', createdAt: '2026-01-01T00:00:00.000Z' })

function countingStore (rows: UserRow[]) {
  const reads: string[][] = []
  const store: Pick<Store, 'usersByIds'> = {
    async usersByIds (ids) {
      reads.push([...ids])
      return rows.filter((r) => ids.includes(r.id))
    }
  }
  return { store: store as Store, reads }
}

test('remembered rows answer the user loader without a read; others are read in one batch', async (t) => {
  const { store, reads } = countingStore([row('a', 'stored a'), row('c')])
  const loaders = createLoaders(store)
  loaders.rememberUsers([row('a'), row('b')])
  loaders.rememberUsers([row('a', 'read later')])
  const [a, b, c, d] = await Promise.all(['a', 'b', 'c', 'd'].map((id) => loaders.userById.load(id)))
  t.equal(a?.name, 'User a', 'the first read of an id wins (as priming did)')
  t.equal(b?.name, 'User b')
  t.equal(c?.name, 'User c')
  t.equal(d, null)
  t.same(reads, [['c', 'd']], 'only the ids not remembered are read, in one batch')
})

test('a user deleted by the request is forgotten: read again, and found gone', async (t) => {
  const { store, reads } = countingStore([])
  const loaders = createLoaders(store)
  loaders.rememberUsers([row('a')])
  t.equal((await loaders.userById.load('a'))?.name, 'User a')
  loaders.forgetUser('a')
  t.equal(await loaders.userById.load('a'), null)
  t.same(reads, [['a']])
})
