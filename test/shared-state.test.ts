// Where each piece of state instances share lives is decided in one place (plugins/redis.ts, `shared`):
// in Redis when the service has one, else in this process. (The start-up line reports these placements.)
import { test } from 'tap'
import { buildTestApp } from './helpers/app.ts'

const SHARED = ['budgets', 'events', 'cached answers', 'APQ texts', 'WS-Security nonces']

test('without Redis everything shared is in process; with Redis, all of it is in Redis', async (t) => {
  const embedded = await buildTestApp(t)
  t.same(Object.keys(embedded.app.redis.placements).sort(), [...SHARED].sort(), 'every piece was placed through it')
  t.same(new Set(Object.values(embedded.app.redis.placements)), new Set(['in-process']))
  const withRedis = await buildTestApp(t, { REDIS_URL: 'redis://127.0.0.1:6379', REDIS_PREFIX: `test:shared:${process.pid}:` })
  t.same(new Set(Object.values(withRedis.app.redis.placements)), new Set(['redis']))
  const off = await buildTestApp(t, { RESPONSE_CACHE: 'false', APQ_MAX_ENTRIES: '0' })
  t.notOk('cached answers' in off.app.redis.placements, 'nothing placed for a cache that is off')
  t.notOk('APQ texts' in off.app.redis.placements, 'nor for APQ when it is off')
})
