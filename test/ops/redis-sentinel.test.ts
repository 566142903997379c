// Redis Sentinel (REDIS_SENTINELS, REDIS_URL naming the master group): a service on a master, its replica
// and a sentinel, all real redis-server processes. Requests reach the master the sentinel names; after a
// failover they reach the new one.
import { test } from 'tap'
import { Redis } from 'ioredis'
import { randomUUID } from 'node:crypto'
import { setTimeout as sleep } from 'node:timers/promises'
import { startPrivateRedis, startRedisSentinel } from '../cluster/harness.ts'
import { gql, listenTestApp } from '../helpers/app.ts'

async function until<T> (what: string, check: () => Promise<T | null | undefined | false>, ms = 20_000): Promise<T> {
  const deadline = Date.now() + ms
  for (;;) {
    const value = await check().catch(() => null)
    if (value) return value
    if (Date.now() > deadline) throw new Error(`not within ${ms} ms: ${what}`)
    await sleep(100)
  }
}

test('a service on Redis Sentinel follows the master through a failover', async (t) => {
  const master = await startPrivateRedis(t)
  const replica = await startPrivateRedis(t, ['--replicaof', '127.0.0.1', String(master.port)])
  const { port: sentinelPort } = await startRedisSentinel(t, 'group', master.port)
  const asked = new Redis({ port: sentinelPort, host: '127.0.0.1', lazyConnect: true, maxRetriesPerRequest: 1 })
  t.teardown(() => asked.disconnect())
  const masterPort = async () => Number((await asked.call('SENTINEL', 'get-master-addr-by-name', 'group') as string[])[1])
  await until('the sentinel watching the master and knowing its replica', async () =>
    (await masterPort()) === master.port && ((await asked.call('SENTINEL', 'replicas', 'group')) as unknown[]).length === 1)

  const prefix = `t-${randomUUID().slice(0, 8)}:`
  const { url, token } = await listenTestApp(t, {
    REDIS_URL: 'redis://group',
    REDIS_SENTINELS: `redis://127.0.0.1:${sentinelPort}`,
    REDIS_PREFIX: prefix
  })
  const on = (port: number) => {
    const client = new Redis({ port, host: '127.0.0.1', lazyConnect: true, maxRetriesPerRequest: 1 })
    t.teardown(() => client.disconnect())
    return client
  }
  const [onMaster, onReplica] = [on(master.port), on(replica.port)]
  const budgetOf = (user: string) => `${prefix}rl:{user:${user}}:req`

  const before = await gql(url, '{ user(id: "1") { id } }', undefined, { authorization: `Bearer ${token('1')}` })
  t.equal(before.status, 200, 'answered on the master the sentinel named')
  t.equal(await onMaster.exists(budgetOf('1')), 1, "the caller's budget is kept on the master")

  await asked.call('SENTINEL', 'failover', 'group')
  await until('the replica promoted', async () => (await masterPort()) === replica.port)
  // A new caller's budget is written where the service now sends its commands: the new master.
  const after = await until('a request answered after the failover, its budget on the new master', async () => {
    const answer = await gql(url, '{ user(id: "2") { id } }', undefined, { authorization: `Bearer ${token('2')}` })
    return answer.status === 200 && (await onReplica.exists(budgetOf('2'))) === 1 && answer
  })
  t.same(after.body.data, { user: { id: '2' } })
  t.equal(await onReplica.call('ROLE').then((role) => (role as string[])[0]), 'master', 'the old replica is the master')
})
