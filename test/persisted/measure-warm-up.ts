// Measures what the persisted-query warm-up saves: latency of the first requests of UserById in a
// fresh app, warmed up from the manifest vs the same text sent ad hoc (cold), median over fresh apps.
// Run: npx node test/persisted/measure-warm-up.ts [rounds=40]
import { buildTestApp } from '../helpers/app.ts'
import { MANIFEST_FILE } from './helpers.ts'
const td: (() => unknown)[] = []
const t = { teardown: (f: () => unknown) => td.push(f) }
const text = 'query UserById($id: ID!) {\n  user(id: $id) {\n    id\n    name\n    createdAt\n  }\n}'
const id = 'sha256:0fdd05ad54ae2d0fa047b982d0d1f50f65dce3f923c1ba58acb6976933c2ae08'
const env = { PRESSURE_MAX_EVENT_LOOP_DELAY_MS: '0' }
async function time (fn: () => Promise<unknown>) {
  const s = process.hrtime.bigint()
  await fn()
  return Number(process.hrtime.bigint() - s) / 1e6
}
const rounds = Number(process.argv[2] ?? 40)
const warm: number[][] = []; const cold: number[][] = []; const startup: number[] = []
// one throwaway app to load all modules
{
  const { app } = await buildTestApp(t, { ...env, PERSISTED_MANIFEST: MANIFEST_FILE })
  await app.ready()
  await app.close()
}
async function warmRun () {
  const a = await buildTestApp(t, { ...env, PERSISTED_MANIFEST: MANIFEST_FILE })
  await a.app.ready(); startup.push(a.app.graphqlInspection.persistedWarmUp!.ms)
  const w: number[] = []
  for (let i = 0; i < 4; i++) {
    w.push(
      await time(() =>
        a.app.inject({ method: 'POST', url: '/graphql', payload: { queryId: id, variables: { id: '2' } } })
      )
    )
  }
  warm.push(w); await a.app.close()
}
async function coldRun () {
  const b = await buildTestApp(t, env)
  await b.app.ready()
  const c: number[] = []
  for (let i = 0; i < 4; i++) {
    c.push(
      await time(() =>
        b.app.inject({ method: 'POST', url: '/graphql', payload: { query: text, variables: { id: '2' } } })
      )
    )
  }
  cold.push(c); await b.app.close()
}
for (let r = 0; r < rounds; r++) {
  if (r % 2) { await warmRun(); await coldRun() } else { await coldRun(); await warmRun() }
}
const med = (xs: number[]) => xs.slice().sort((x, y) => x - y)[Math.floor(xs.length / 2)]!.toFixed(2)
for (let i = 0; i < 4; i++) {
  console.log(
    `request ${i + 1}: warmed-up ${med(warm.map((w) => w[i]!))} ms, cold ${med(cold.map((c) => c[i]!))} ms (median of ${rounds})`
  )
}
console.log(`warm-up of the manifest's operations at start: median ${med(startup)} ms`)
for (const f of td) await f()
