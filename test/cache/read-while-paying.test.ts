// With Redis counted per request, a query's cost charge and its response-cache lookup are two round trips;
// the lookup is sent while the charge is on its way (Pipeline's `onPriced`), so both go out in one
// write, and its answer is used only once the charge is paid. Through a listening service on Redis, watched
// with MONITOR, with the charge held by the test until it has seen what Redis received.
import { test } from 'tap'
import { randomUUID } from 'node:crypto'
import { setTimeout as sleep } from 'node:timers/promises'
import { AppError } from '../../app/core/errors.ts'
import type { CostReport } from '../../app/core/limits/cost-report.ts'
import { gql, listenTestApp } from '../helpers/app.ts'
import { monitorRedis } from '../cluster/harness.ts'

const REDIS_URL = process.env.TEST_REDIS_URL ?? 'redis://127.0.0.1:6379'

test('the cache lookup reaches Redis while the charge is unanswered; a refused charge sends the client nothing of it', async (t) => {
  const prefix = `t-${randomUUID().slice(0, 8)}:`
  const monitor = await monitorRedis(t, REDIS_URL)
  const received: string[] = []
  monitor.on('monitor', (_time: string, args: string[]) => {
    const key = args.find((a) => a.startsWith(prefix))
    if (key?.includes('}:a:')) received.push('lookup')
    else if (key?.startsWith(`${prefix}rl:`) && key.endsWith(':cost')) received.push('charge')
  })
  // Per request: every charge is a round trip (with leases, most are answered from the instance's share at once).
  const { app, url } = await listenTestApp(t, { REDIS_URL, REDIS_PREFIX: prefix, RATE_LIMIT_COUNTING: 'per-request' })

  // The charge is sent to Redis as always; its answer is held until the test lets it through.
  const budgets = app.budgets
  const charge = budgets.chargeCost.bind(budgets)
  let gate: { open: () => void; refuse: () => void } | undefined
  budgets.chargeCost = (caller, ip, cost) => {
    const sent = charge(caller, ip, cost)
    return new Promise<CostReport>((resolve, reject) => {
      gate = {
        open: () => { Promise.resolve(sent).then(resolve, reject) },
        refuse: () => reject(new AppError('RATE_LIMITED', 'Cost rate limit exceeded', { retryAfter: 1 }))
      }
    })
  }
  const until = async (what: () => boolean) => {
    for (let i = 0; i < 100 && !what(); i++) await sleep(10)
    return what()
  }
  const query = '{ user(id: "2") { name } }'

  const first = gql(url, query)
  t.ok(await until(() => received.includes('lookup')), 'the lookup is received while the charge is held')
  t.ok(received.indexOf('charge') !== -1 && received.indexOf('charge') < received.indexOf('lookup'), 'the charge first, then the lookup')
  gate!.open()
  const executed = await first
  t.ok(executed.body.data.user.name, 'executed once paid')
  t.equal(executed.headers.get('age'), null)

  received.length = 0
  const second = gql(url, query)
  t.ok(await until(() => received.includes('lookup')), 'again for a hit')
  gate!.open()
  const hit = await second
  t.equal(hit.headers.get('age'), '0', 'the entry served once paid')
  t.same(hit.body.data, executed.body.data)

  received.length = 0
  const third = gql(url, query)
  t.ok(await until(() => received.includes('lookup')))
  gate!.refuse()
  const refused = await third
  t.equal(refused.body.data, undefined, 'a refused charge: nothing of the entry read meanwhile is sent')
  t.equal(refused.status, 429)
  t.same(refused.body.errors.map((e: { extensions: { code: string } }) => e.extensions.code), ['RATE_LIMITED'])
})
