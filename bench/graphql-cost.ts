// What the GraphQL routes itself spends on a persisted GET, in process:
//   npx node bench/graphql-cost.ts [requests=300000] [rounds=5]
// Calls the GraphQL HTTP exchange (routes/graphql/http-exchange.ts) directly, as the route does once the
// caller is identified: no socket, no HTTP parsing, no Fastify, none of the protections' hooks (JWT,
// request budget, metrics, access log...). Two services on the same seeded store, production profile:
// the response cache on (every request after the first of each user is a hit) and off (every request
// executes). Prints the process's CPU µs per request, per round.
//
// Read it beside `npm run bench`'s CPU µs/req for cached-persisted-get and persisted-get: the difference
// is what every request pays outside the engine, whatever answers it (guarded-user-get, which has no
// GraphQL at all, pays it too). The whole-service figures move by a fifth between runs on a shared
// machine; these, with nothing else in the process, move far less.
import { buildApp } from '../app/app.ts'
import { loadConfig } from '../app/core/config/index.ts'
import { openSqliteStore } from '../app/core/store/sqlite.ts'
import { loadManifests } from '../app/graphql/persisted-manifest.ts'
import type { HttpExchangeInput } from '../routes/graphql/http-exchange.ts'
import { PERSISTED_MANIFEST } from './transports.ts'

const [requests = 300_000, rounds = 5] = process.argv.slice(2).map(Number)
const USERS = 1000
const IN_FLIGHT = 50 // as the bench's 50 connections

const userById = [...loadManifests([PERSISTED_MANIFEST]).byId.values()].find((op) => op.name === 'UserById')
if (!userById) throw new Error(`${PERSISTED_MANIFEST} has no UserById operation`)

const store = openSqliteStore(':memory:')
for (let i = 0; i < USERS; i++) await store.createUser({ name: `User ${i}`, email: `user${i}@example.com` })
const ids = (await store.listUsers(USERS)).map((user) => user.id)

async function serviceWith (responseCache: boolean) {
  const config = loadConfig({
    NODE_ENV: 'production',
    JWT_SECRET: 'graphql-cost-secret-that-is-long-enough-0123456789',
    PARTNER_SECRET_KEY: 'graphql-cost-partner-key-that-is-long-enough-0123',
    DEMO_DATA: 'false',
    PERSISTED_MANIFEST,
    RESPONSE_CACHE: String(responseCache),
    RATE_LIMIT_REQUESTS: '1000000000',
    RATE_LIMIT_COST: '1000000000000'
  })
  const app = await buildApp(config, { store, logger: false })
  await app.ready()
  return app
}

/** persisted-get's request for each user, as the route hands it to the exchange (the caller identified). */
const inputs: HttpExchangeInput[] = ids.map((id) => {
  const query = { queryId: userById.id, variables: JSON.stringify({ id }) }
  return {
    method: 'GET',
    url: `/graphql?${new URLSearchParams(query)}`,
    headers: { authorization: 'Bearer (identified by the route)', accept: '*/*' },
    query,
    caller: { id, role: 'USER' },
    ip: '127.0.0.1'
  }
})

for (const [row, responseCache] of [['cached-persisted-get', true], ['persisted-get', false]] as const) {
  const app = await serviceWith(responseCache)
  const exchange = app.graphqlInspection.exchange
  const run = async (count: number) => {
    for (let i = 0; i < count; i += IN_FLIGHT) {
      const batch = []
      for (let k = 0; k < IN_FLIGHT; k++) batch.push(exchange(inputs[(i + k) % inputs.length]!))
      for (const result of await Promise.all(batch)) {
        if (!('status' in result) || result.status !== 200 || result.body?.includes('"errors"')) {
          throw new Error(`${row}: unexpected answer ${JSON.stringify(result)}`)
        }
        if (responseCache && i >= inputs.length && result.headers.age === undefined) throw new Error(`${row}: not a hit`)
      }
    }
  }
  await run(Math.max(30_000, 2 * inputs.length)) // warm-up: V8 optimises the path, every entry filled
  const perRequest: string[] = []
  for (let round = 0; round < rounds; round++) {
    const start = process.cpuUsage()
    await run(requests)
    const used = process.cpuUsage(start)
    perRequest.push(((used.user + used.system) / requests).toFixed(2))
  }
  console.log(`${row}: ${perRequest.join(', ')} CPU µs per request in the engine (rounds of ${requests})`)
  await app.close()
}
await store.close()
