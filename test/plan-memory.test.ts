// What compiled documents keep alive, through a listening server: the plan cache's byte estimate
// covers a plan and its graphql-jit compilation, and nothing outlives an evicted plan (V8's eval
// cache once kept every compilation: about 2 MiB per distinct 8 KB document).
import { test } from 'tap'
import { setFlagsFromString } from 'node:v8'
import { runInNewContext } from 'node:vm'
import { gql, listenTestApp } from './helpers/app.ts'

// A full garbage collection on demand, to read what the heap really retains.
setFlagsFromString('--expose-gc')
const collectGarbage = runInNewContext('gc') as () => void
const MiB = 1024 * 1024

/**
 * A distinct document of about `size` characters: aliased root list
 * fields, the shape whose compilation weighs most per character.
 */
function document (n: number, size: number): string {
  const fields: string[] = []
  for (let k = 0; fields.join(' ').length < size; k++) fields.push(`d${n}_${k}: users(limit: 1) { id }`)
  return `{ ${fields.join(' ')} }`
}

// The documents are made of aliased fields (distinct texts of a given size): the alias cap is lifted.
const env = { RATE_LIMIT_REQUESTS: '100000', RATE_LIMIT_COST: '100000000', MAX_ALIASES: '100000' }

test('1000 distinct documents, each executed (compiled): after GC the heap has grown by less than PLAN_CACHE_BYTES + 16 MiB', async (t) => {
  const PLAN_CACHE_BYTES = 4 * MiB
  const { app, url } = await listenTestApp(t, { ...env, PLAN_CACHE_BYTES: String(PLAN_CACHE_BYTES) })
  await gql(url, document(-1, 2000))
  collectGarbage()
  const before = process.memoryUsage().heapUsed
  for (let n = 0; n < 1000; n++) {
    const { body } = await gql(url, document(n, 2000))
    if (!body.data) { t.fail(`document ${n} did not run: ${JSON.stringify(body).slice(0, 300)}`); break }
  }
  collectGarbage()
  const grown = process.memoryUsage().heapUsed - before
  const { bytes, entries } = app.graphqlInspection.planCache
  t.ok(bytes <= PLAN_CACHE_BYTES, `the cache keeps ${entries} plans, ${bytes} estimated bytes`)
  t.ok(grown < PLAN_CACHE_BYTES + 16 * MiB, `the heap grew by ${(grown / MiB).toFixed(1)} MiB`)
})

test('a cached plan weighs at least what it keeps alive, its compilation included', async (t) => {
  const { app, url } = await listenTestApp(t, { ...env, PLAN_CACHE_BYTES: String(1024 * MiB) })
  await gql(url, document(-1, 8000))
  collectGarbage()
  const before = process.memoryUsage().heapUsed
  const cachedBefore = app.graphqlInspection.planCache.bytes
  for (let n = 0; n < 60; n++) t.ok((await gql(url, document(n, 8000))).body.data, `document ${n} ran`)
  collectGarbage()
  const retained = process.memoryUsage().heapUsed - before
  const estimated = app.graphqlInspection.planCache.bytes - cachedBefore
  t.ok(
    retained <= estimated,
    `60 plans keep ${(retained / MiB).toFixed(1)} MiB; the cache counts ${(estimated / MiB).toFixed(1)} MiB`
  )
  t.ok(estimated <= 2 * retained, 'and not more than twice as much')
})
