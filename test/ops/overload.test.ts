// Overload protection: load shedding while the event loop lags, and the request body cap on every route.
import { test } from 'tap'
import { setTimeout as sleep } from 'node:timers/promises'
import type { FastifyInstance } from 'fastify'
import { PRESSURE_MESSAGE } from '../../plugins/under-pressure.ts'
import { buildTestApp, gql, listenTestApp } from '../helpers/app.ts'

/** Blocks this process's event loop for `ms` (the server under test shares it). */
function block (ms: number) {
  const end = Date.now() + ms
  while (Date.now() < end) { /* busy: no callbacks run */ }
}

test('a lagging event loop sheds load: 503 + Retry-After in the GraphQL error shape, liveness exempt, then recovery', async (t) => {
  const { url } = await listenTestApp(t, {
    PRESSURE_MAX_EVENT_LOOP_DELAY_MS: '40',
    PRESSURE_SAMPLE_INTERVAL_MS: '25',
    PRESSURE_RETRY_AFTER_SEC: '7',
    RATE_LIMIT_REQUESTS: '100000'
  })
  // (Building the app lags the loop too: wait for the first healthy samples.)
  let healthy = false
  for (let attempt = 0; attempt < 50 && !healthy; attempt++) {
    await sleep(20)
    healthy = (await gql(url, '{ users(limit: 1) { id } }')).status === 200
  }
  t.ok(healthy, 'served while the loop is healthy')

  // Keep the loop stalled in 150 ms bursts, as a CPU-bound request or a GC storm would.
  let stalling = true
  const staller = (async () => { while (stalling) { block(150); await sleep(5) } })()
  let shed: Awaited<ReturnType<typeof gql>> | undefined
  let live: Response | undefined
  let soapFault: { status: number; retryAfter: string | null; text: string } | undefined
  for (let attempt = 0; attempt < 40 && !shed; attempt++) {
    const response = await gql(url, '{ users(limit: 1) { id } }')
    if (response.status === 503) {
      shed = response
      live = await fetch(`${url}/health/live`)
      const soap = await fetch(`${url}/v1/UserService`, {
        method: 'POST',
        headers: { 'content-type': 'text/xml; charset=utf-8' },
        body: '<x/>'
      })
      soapFault = { status: soap.status, retryAfter: soap.headers.get('retry-after'), text: await soap.text() }
    }
  }
  stalling = false
  await staller
  t.ok(shed, 'a request was shed while the loop lagged')
  t.equal(shed?.headers.get('retry-after'), '7')
  t.same(shed?.body, {
    errors: [{ message: PRESSURE_MESSAGE, extensions: { code: 'SERVICE_UNAVAILABLE', retryAfterSec: 7 } }]
  })
  t.equal(live?.status, 200, 'liveness is exempt: the process is alive, only busy')
  t.equal(soapFault?.retryAfter, '7', 'a SOAP caller is shed too')
  t.match(soapFault?.text, /<faultcode>soap:Server<\/faultcode>[\s\S]*SERVICE_UNAVAILABLE/, 'with a SOAP fault, not JSON')
  t.match(soapFault?.text, PRESSURE_MESSAGE)

  // Recovers by itself once the loop is healthy again.
  let recovered = false
  for (let attempt = 0; attempt < 50 && !recovered; attempt++) {
    await sleep(20)
    recovered = (await gql(url, '{ users(limit: 1) { id } }')).status === 200
  }
  t.ok(recovered, 'served again once the lag is gone')
})

test('a healthy loop is not shed: 300 concurrent requests all answered', async (t) => {
  // One client opening 300 connections at once: the per-address connection cap is off for it.
  const { url } = await listenTestApp(t, { RATE_LIMIT_REQUESTS: '100000', MAX_CONNECTIONS_PER_IP: '0' })
  await sleep(600) // one sample past the start-up lag, at the default interval
  const statuses = await Promise.all(
    Array.from({ length: 300 }, () => gql(url, '{ users(limit: 5) { id name } }').then((r) => r.status))
  )
  t.same([...new Set(statuses)], [200])
})

/** Every route and its methods, from Fastify's route tree. */
function routesOf (app: FastifyInstance): { path: string; methods: string[] }[] {
  const routes: { path: string; methods: string[] }[] = []
  const stack: string[] = []
  for (const line of app.printRoutes({ commonPrefix: false }).split('\n')) {
    const match = /^([│ ├└─]*)(\S+) \(([A-Z, ]+)\)$/.exec(line)
    if (!match) continue
    const depth = Math.round(match[1]!.length / 4)
    stack.length = depth
    const path = (stack[depth - 1] ?? '') + match[2]!
    stack[depth] = path
    routes.push({ path, methods: match[3]!.split(', ') })
  }
  return routes
}

// GraphQL answers 413; the SOAP binding answers a fault carrying PAYLOAD_TOO_LARGE (faults have their own statuses).
test('every route that takes a body refuses one over BODY_LIMIT_BYTES (413 or a PAYLOAD_TOO_LARGE fault)', async (t) => {
  const limit = 4096
  // The app deployment routes take manifests up to DEPLOYMENTS_MAX_BYTES, from an administrator only
  // (anyone else is refused before the body is read): the same bound here, and an administrator's token.
  const { app, token } = await buildTestApp(t, {
    BODY_LIMIT_BYTES: String(limit), DEPLOYMENTS_MAX_BYTES: String(limit), RATE_LIMIT_REQUESTS: '100000'
  })
  const admin = `Bearer ${token('1', 'ADMIN')}`
  await app.ready()
  const withBody = routesOf(app).filter((r) => r.methods.some((m) => ['POST', 'PUT', 'PATCH', 'DELETE'].includes(m)))
  t.ok(withBody.some((r) => r.path === '/graphql'), `routes with a body: ${withBody.map((r) => r.path).join(', ')}`)
  const big = 'x'.repeat(limit + 1)
  for (const route of withBody) {
    for (const method of route.methods.filter((m) => ['POST', 'PUT', 'PATCH', 'DELETE'].includes(m))) {
      const statuses: number[] = []
      let capped = false
      for (const [type, payload] of [
        ['application/json', JSON.stringify({ query: big })],
        ['text/xml; charset=utf-8', `<a>${big}</a>`],
        ['application/soap+xml; charset=utf-8', `<a>${big}</a>`]
      ] as const) {
        const response = await app.inject({
          method: method as 'POST',
          url: route.path,
          headers: { 'content-type': type, authorization: admin },
          payload
        })
        statuses.push(response.statusCode)
        if (response.statusCode === 413 || (response.statusCode >= 400 && response.body.includes('PAYLOAD_TOO_LARGE'))) {
          capped = true
        }
      }
      t.ok(capped, `${method} ${route.path}: the accepted media type is capped (${statuses.join(', ')})`)
      t.ok(
        statuses.every((s) => s >= 400),
        `${method} ${route.path}: no oversized body is processed (${statuses.join(', ')})`
      )
    }
  }
})
