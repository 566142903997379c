// Concurrent misses of one answer execute once: identical requests arriving together on a listening
// server (the in-process cache) make one store read between them, where each would otherwise make its own.
import { test } from 'tap'
import { listenTestApp, gql } from '../helpers/app.ts'
import { countingStore } from '../helpers/counting-store.ts'

/** The store methods a query reads through (everything else is a write, a credential or a health check). */
const READS = new Set(['usersByIds', 'listUsers', 'usersAfter', 'messagesByRoom', 'messagesPage', 'countUsers'])
const N = 20

test('N concurrent identical queries make one store read batch', async (t) => {
  const { store, calls } = countingStore()
  const { url } = await listenTestApp(t, { PRESSURE_MAX_EVENT_LOOP_DELAY_MS: '0' }, { store })
  const reads = () => calls.filter((c) => READS.has(c.method))
  calls.length = 0

  const one = await Promise.all(Array.from({ length: N }, () =>
    gql(url, 'query One($id: ID!) { user(id: $id) { id name } }', { id: '2' })))
  t.ok(one.every((r) => r.status === 200))
  t.same([...new Set(one.map((r) => JSON.stringify(r.body.data)))], [JSON.stringify({ user: { id: '2', name: 'Ada Lovelace' } })])
  t.same(reads(), [{ method: 'usersByIds', args: [['2']] }], `${N} requests for user 2: one read batch`)
  t.ok(one.some((r) => r.headers.get('age') === null), 'one of them executed (no Age)')

  calls.length = 0
  const list = await Promise.all(Array.from({ length: N }, () => gql(url, '{ users(limit: 3) { id name } }')))
  t.equal(new Set(list.map((r) => JSON.stringify(r.body.data))).size, 1)
  t.same(reads().map((c) => c.method), ['listUsers'], `${N} requests for the users list: one read`)

  calls.length = 0
  const two = await Promise.all(Array.from({ length: N }, (_, i) =>
    gql(url, 'query One($id: ID!) { user(id: $id) { id name } }', { id: i % 2 === 0 ? '3' : '4' })))
  t.ok(two.every((r) => r.status === 200 && r.body.data.user))
  t.same(reads().map((c) => c.args).sort(), [[['3']], [['4']]], 'two answers, one read batch each')
})
