// The budgets across three real instances on one Redis: one caller sends 1000 requests within about a
// second, spread over the instances, against a limit of 100 a window. docs/guarantees.md promises that
// no more than the limit is admitted across any number of instances (leases, and per request), and that
// a share leased to one instance reaches the caller's requests there.
import { test } from 'tap'
import { gql, startInstances, token } from './harness.ts'

const LIMIT = 100
const COST_LIMIT = 1000
const BURST = 1000

for (const counting of ['leases', 'per-request'] as const) {
  test(`three instances, ${counting}: a burst of ${BURST} admits at most the limit`, async (t) => {
    const { instances } = await startInstances(t, {
      size: 3,
      env: {
        RATE_LIMIT_COUNTING: counting,
        RATE_LIMIT_REQUESTS: String(LIMIT),
        RATE_LIMIT_COST: String(COST_LIMIT),
        RATE_LIMIT_WINDOW_MS: '60000'
      }
    })
    const send = async (caller: string, query: string) => {
      const statuses: number[] = []
      const costs: number[] = []
      let next = 0
      const started = Date.now()
      await Promise.all(Array.from({ length: 48 }, async () => {
        while (next < BURST) {
          const i = next++
          const { status, body } = await gql(instances[i % 3]!.url, query, undefined, { token: token(caller) })
          statuses.push(status)
          if (status === 200) costs.push(body.extensions.cost.requested)
          else if (status !== 429) throw new Error(`answered ${status}: ${JSON.stringify(body)}`)
        }
      }))
      return { statuses, costs, ms: Date.now() - started }
    }

    // The request budget: 100 a window for this caller, whichever instance a request reaches.
    const requests = await send('budget-caller-requests', '{ user(id: "2") { name } }')
    const admitted = requests.statuses.filter((s) => s === 200).length
    t.comment(`${counting}: ${admitted} of ${BURST} admitted in ${requests.ms} ms`)
    t.ok(admitted <= LIMIT, `no more than the limit admitted (${admitted})`)
    t.ok(admitted >= LIMIT * 0.95, `and the caller got (nearly) all of it (${admitted})`)

    // The cost budget: operations of 30 units against 1000 a window; the request limit is a different caller's.
    const priced = await send('budget-caller-cost', '{ users(limit: 15) { id name } }')
    const units = priced.costs.reduce((sum, cost) => sum + cost, 0)
    t.ok(priced.costs.length > 0 && priced.costs.every((c) => c === priced.costs[0]), `every operation cost ${priced.costs[0]}`)
    t.ok(units <= COST_LIMIT, `no more cost units admitted than the limit (${units})`)
    t.ok(units >= COST_LIMIT - 3 * priced.costs[0]!, `nor many fewer (${units})`)
  })
}
