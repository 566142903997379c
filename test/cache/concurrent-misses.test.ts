// Concurrent misses of one answer execute once: identical requests in flight together on a listening
// server (the in-process cache) make one store read between them, where each would otherwise make its own.
// The store's reads are held until the server has received every request of a round, so that the
// requests truly overlap (the in-memory store would otherwise answer the first before the next arrives).
import { test } from 'tap'
import { listenTestApp, gql } from '../helpers/app.ts'
import { countingStore } from '../helpers/counting-store.ts'
import { openSqliteStore } from '../../app/core/store/sqlite.ts'
import type { Store } from '../../app/core/store/types.ts'
import { metricValue } from './instances.ts'

/** The store methods a query reads through (everything else is a write, a credential or a health check). */
const READS = new Set(['usersByIds', 'listUsers', 'usersAfter', 'messagesByRoom', 'messagesPage', 'countUsers'])
const N = 20

/** A store whose reads wait for `gate.open` (open unless a round closed it). */
function gatedReads (store: Store) {
  const gate = { open: Promise.resolve() }
  const gated = new Proxy(store, {
    get (target, property, receiver) {
      const value = Reflect.get(target, property, receiver)
      if (typeof value !== 'function' || !READS.has(String(property))) return value
      return async (...args: unknown[]) => {
        await gate.open
        return value.apply(target, args)
      }
    }
  })
  return { store: gated, gate }
}

test('N concurrent identical queries make one store read batch', async (t) => {
  const { store: gated, gate } = gatedReads(openSqliteStore(':memory:'))
  const { store, calls } = countingStore(gated)
  const { app, url } = await listenTestApp(t, { PRESSURE_MAX_EVENT_LOOP_DELAY_MS: '0' }, { store })
  t.teardown(() => gated.close())
  const reads = () => calls.filter((c) => READS.has(c.method))

  /** Sends `count` requests at once; store reads wait until the server has received them all (at most 10 s). */
  async function round<R> (count: number, send: (i: number) => Promise<R>): Promise<R[]> {
    calls.length = 0
    let received = 0
    let release!: () => void
    gate.open = new Promise<void>((resolve) => { release = resolve })
    const onRequest = () => { if (++received === count) release() }
    const timer = setTimeout(() => release(), 10_000)
    app.server.on('request', onRequest)
    try {
      return await Promise.all(Array.from({ length: count }, (_, i) => send(i)))
    } finally {
      app.server.off('request', onRequest)
      clearTimeout(timer)
      release()
    }
  }

  const one = await round(N, () => gql(url, 'query One($id: ID!) { user(id: $id) { id name } }', { id: '2' }))
  t.ok(one.every((r) => r.status === 200))
  t.same([...new Set(one.map((r) => JSON.stringify(r.body.data)))], [JSON.stringify({ user: { id: '2', name: 'Ada Lovelace' } })])
  t.same(reads(), [{ method: 'usersByIds', args: [['2']] }], `${N} requests for user 2: one read batch`)
  t.equal(one.filter((r) => r.headers.get('age') === null).length, 1, 'one of them executed (no Age), the others waited for it')
  const metrics = await (await fetch(`${url}/metrics`)).text()
  t.equal(metricValue(metrics, 'graphql_response_cache_misses_total'), 1, 'one miss executed')
  t.equal(metricValue(metrics, 'graphql_response_cache_hits_total'), N - 1, 'the others count as hits')
  t.ok(metricValue(metrics, 'graphql_response_cache_bytes')! > 0, 'the in-process cache reports the bytes it holds')

  const list = await round(N, () => gql(url, '{ users(limit: 3) { id name } }'))
  t.equal(new Set(list.map((r) => JSON.stringify(r.body.data))).size, 1)
  t.same(reads().map((c) => c.method), ['listUsers'], `${N} requests for the users list: one read`)

  const two = await round(N, (i) =>
    gql(url, 'query One($id: ID!) { user(id: $id) { id name } }', { id: i % 2 === 0 ? '3' : '4' }))
  t.ok(two.every((r) => r.status === 200 && r.body.data.user))
  t.same(reads().map((c) => c.args).sort(), [[['3']], [['4']]], 'two answers, one read batch each')
})
