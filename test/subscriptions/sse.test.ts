// Subscriptions over server-sent events (graphql-sse protocol, distinct connections mode) against a
// listening server, with the real graphql-sse client and with raw fetch for the wire format.
import { test } from 'tap'
import { createSigner } from 'fast-jwt'
import type { Config } from '../../app/core/config/index.ts'
import type { Role } from '../../app/core/store/types.ts'
import { gql, listenTestApp } from '../helpers/app.ts'
import { collect, eventually, roomListeners, sseClient, within } from './clients.ts'

/** A token for `sub` that expires `expiresInMs` after `issuedAt` (exp has a resolution of a second). */
function tokenExpiring (config: Config, sub: string, role: Role, expiresInMs: number, issuedAt = Date.now()): string {
  return createSigner({
    key: config.jwt.secret!,
    expiresIn: expiresInMs,
    clockTimestamp: issuedAt,
    ...(config.jwt.issuer ? { iss: config.jwt.issuer } : {}),
    ...(config.jwt.audience ? { aud: config.jwt.audience } : {})
  })({ sub, role })
}

const TOKEN_EXPIRED = { errors: [{ message: 'Token expired', extensions: { code: 'UNAUTHENTICATED' } }] }

test('count over SSE: next events, then complete, on POST /graphql with Accept: text/event-stream', async (t) => {
  const { url, token } = await listenTestApp(t)
  const outcome = await collect(sseClient(url, `Bearer ${token('2')}`), 'subscription { count(target: 2) }').done
  t.same(outcome.values, [{ data: { count: 0 } }, { data: { count: 1 } }])
  t.ok(outcome.completed)

  const response = await fetch(`${url}/graphql`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', accept: 'text/event-stream', authorization: `Bearer ${token('2')}` },
    body: JSON.stringify({ query: 'subscription { count(target: 1) }' })
  })
  t.equal(response.status, 200)
  t.match(response.headers.get('content-type'), /^text\/event-stream/)
  t.ok(response.headers.get('x-request-id'), 'hook headers go out')
  const text = await response.text()
  t.match(text, /event: next\ndata: \{"data":\{"count":0\}\}\n\n/)
  t.match(text, /event: complete\n/)
})

test('SSE is authenticated with the Authorization header', async (t) => {
  const { url, token, app } = await listenTestApp(t)
  const bad = await fetch(`${url}/graphql`, {
    method: 'POST',
    headers: {
      'content-type': 'application/json',
      accept: 'text/event-stream',
      authorization: 'Bearer broken.token.value'
    },
    body: JSON.stringify({ query: 'subscription { count(target: 1) }' })
  })
  t.equal(bad.status, 401)
  t.match(await bad.json(), { errors: [{ extensions: { code: 'UNAUTHENTICATED' } }] })
  const refused = await collect(sseClient(url, 'Bearer broken.token.value'), 'subscription { count(target: 1) }').done
  t.match(refused.error, { response: { status: 401 } }, 'the graphql-sse client sees the refusal')

  const query = 'subscription { messageAdded(roomId: "sse") { content author { id email } } }'
  const own = collect(sseClient(url, `Bearer ${token('2')}`), query)
  const anonymous = collect(sseClient(url), query)
  await eventually(
    () =>
      app.graphqlInspection.subscriptionStats().eventStreams === 2 &&
      app.graphqlInspection.subscriptionStats().topicSubscribers === 2 &&
      roomListeners(app, 'sse') === 1,
    3000,
    'two live streams'
  )
  await gql(url, 'mutation { postMessage(roomId: "sse", content: "over sse") { id } }', undefined, {
    authorization: `Bearer ${token('2')}`
  })
  await eventually(() => own.outcome.values.length === 1 && anonymous.outcome.values.length === 1, 3000, 'the event')
  t.same(own.outcome.values[0], {
    data: { messageAdded: { content: 'over sse', author: { id: '2', email: 'ada@example.com' } } }
  })
  t.match(anonymous.outcome.values[0], {
    data: { messageAdded: { author: { id: '2', email: null } } },
    errors: [{ extensions: { code: 'UNAUTHENTICATED' } }]
  })
  own.dispose()
  anonymous.dispose()
  await eventually(
    () => app.graphqlInspection.subscriptionStats().eventStreams === 0 && roomListeners(app, 'sse') === 0,
    3000,
    'streams released'
  )
  t.pass('a client that leaves releases its stream and its listener')
})

test('SSE operations are validated and limited like WebSocket ones', async (t) => {
  const { url, app } = await listenTestApp(t, { MAX_DEPTH: '2' })
  const client = sseClient(url)
  const deep = await collect(client, 'subscription { messageAdded(roomId: "r") { author { name } } }').done
  t.match(deep.values, [
    {
      errors: [
        { message: 'Query depth 3 exceeds the maximum depth of 2', extensions: { code: 'DEPTH_LIMIT_EXCEEDED' } }
      ]
    }
  ])
  t.notOk((deep.values[0] as any).data, 'no data: nothing ran')
  t.ok(deep.completed)
  // Queries are carried too (graphql-sse allows every operation type), through the same admission.
  const query = await collect(client, '{ users(limit: 1) { id } }').done
  t.same(query.values, [{ data: { users: [{ id: '1' }] } }])
  t.ok(query.completed)
  const target = await collect(client, 'subscription { count(target: 1000) }').done
  t.match(target.values, [
    { errors: [{ message: 'target must be between 0 and 100', extensions: { code: 'BAD_USER_INPUT' } }] }
  ])
  t.equal(app.graphqlInspection.subscriptionStats().eventStreams, 0)
})

test('event streams count against the per-client connection cap', async (t) => {
  const { url, token, app } = await listenTestApp(t, { WS_MAX_CONNECTIONS_PER_CLIENT: '1' })
  const first = collect(sseClient(url, `Bearer ${token('2')}`), 'subscription { count(target: 5) }')
  await eventually(() => app.graphqlInspection.subscriptionStats().eventStreams === 1, 3000, 'the first stream')
  const second = await fetch(`${url}/graphql`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', accept: 'text/event-stream', authorization: `Bearer ${token('2')}` },
    body: JSON.stringify({ query: 'subscription { count(target: 1) }' })
  })
  t.equal(second.status, 429)
  t.match(await second.json(), {
    errors: [{ message: 'Too many connections for this client: at most 1', extensions: { code: 'RATE_LIMITED' } }]
  })
  first.dispose()
  await eventually(() => app.graphqlInspection.subscriptionStats().clients === 0, 3000, 'the slot released')
  t.ok(
    (await collect(sseClient(url, `Bearer ${token('2')}`), 'subscription { count(target: 1) }').done).completed,
    'a new stream is accepted'
  )
})

test('an event stream ends at its token\'s exp: a next with UNAUTHENTICATED "Token expired", then complete', async (t) => {
  const { url, app, config } = await listenTestApp(t)
  const expiring = tokenExpiring(config, '2', 'USER', 3000)
  const counting = collect(sseClient(url, `Bearer ${expiring}`), 'subscription { count(target: 100) }')
  t.teardown(() => counting.dispose())
  const outcome = await within(counting.done, 6000, 'SSE token expiry: the count stream did not stop at exp')
  t.ok(outcome.completed, 'completed, not cut')
  t.notOk(outcome.error)
  const last = outcome.values.at(-1)
  t.same(last, TOKEN_EXPIRED, 'the last event says why')
  t.ok(outcome.values.length >= 2 && outcome.values.length <= 4, `${outcome.values.length - 1} ticks before the token expired, then none`)
  await eventually(() => app.graphqlInspection.subscriptionStats().eventStreams === 0, 2000, 'the stream released')
})

test('an ADMIN stream whose token expired never delivers an event (with email) after exp', async (t) => {
  const { url, app, config, token } = await listenTestApp(t)
  const QUERY = 'subscription { messageAdded(roomId: "expiry") { content author { email } } }'
  const post = (content: string) => gql(url, `mutation { postMessage(roomId: "expiry", content: "${content}") { id } }`,
    undefined, { authorization: `Bearer ${token('2')}` })

  // Expired 3 s ago: still within JWT_CLOCK_TOLERANCE_SEC (5 s), so the request is accepted; the stream
  // ends at once, before any event.
  const lateAdmin = tokenExpiring(config, '1', 'ADMIN', 1000, Date.now() - 4000)
  const late = collect(sseClient(url, `Bearer ${lateAdmin}`), QUERY)
  t.teardown(() => late.dispose())
  const lateOutcome = await within(late.done, 3000, 'SSE token expiry: a stream opened with an expired token was not ended')
  t.same(lateOutcome.values, [TOKEN_EXPIRED], 'no event, only the refusal')

  // Valid for a second or two: delivers while valid, then ends, and the next post reaches nobody.
  const admin = collect(sseClient(url, `Bearer ${tokenExpiring(config, '1', 'ADMIN', 2000)}`), QUERY)
  t.teardown(() => admin.dispose())
  await eventually(() => app.graphqlInspection.subscriptionStats().topicSubscribers === 1, 2000, 'the stream subscribed')
  await post('while valid')
  const outcome = await within(admin.done, 5000, 'SSE token expiry: the ADMIN stream did not end at exp')
  t.match(outcome.values[0], { data: { messageAdded: { content: 'while valid', author: { email: 'ada@example.com' } } } })
  t.same(outcome.values.slice(1), [TOKEN_EXPIRED], 'then only the refusal')
  t.ok(outcome.completed)
  await post('after expiry')
  await new Promise((resolve) => setTimeout(resolve, 200))
  t.equal(outcome.values.length, 2, 'nothing after exp')
  t.equal(app.graphqlInspection.subscriptionStats().topicSubscribers, 0, 'the subscription left the room')
})

test('an event stream ends after SUBSCRIBER_MAX_LIFETIME_MS, without complete (the client reconnects)', async (t) => {
  const { url, app, token } = await listenTestApp(t, { SUBSCRIBER_MAX_LIFETIME_MS: '1000' })
  const started = Date.now()
  const response = await fetch(`${url}/graphql`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', accept: 'text/event-stream', authorization: `Bearer ${token('2')}` },
    body: JSON.stringify({ query: 'subscription { messageAdded(roomId: "lifetime") { id } }' })
  })
  t.equal(response.status, 200)
  const text = await within(response.text(), 4000, 'SSE lifetime: the stream did not end')
  const lived = Date.now() - started
  t.ok(lived >= 850, `not before the lifetime, less its random tenth (${lived} ms)`)
  t.notMatch(text, /event: complete/, 'no complete: the operation is not over, the client opens it again')
  await eventually(() => app.graphqlInspection.subscriptionStats().eventStreams === 0, 2000, 'the stream released')
})
