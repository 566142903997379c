// A user's role change or deletion reaches long-lived work (app/graphql/operations.ts,
// app/core/domain/users.ts, plugins/events.ts): that user's running subscriptions end within seconds on
// WebSocket and SSE, and no new one starts with the token's old rights, on the same connection or a new
// one. Against a listening server with real clients (graphql-ws, graphql-sse).
import { test } from 'tap'
import { gql, listenTestApp } from '../helpers/app.ts'
import { collect, eventually, sseClient, wsClient } from './clients.ts'

const ROOM = 'subscription { messageAdded(roomId: "identity") { content author { id email adminNotes } } }'
/** How long a user change may take to end its subscriptions ("within seconds"). */
const WITHIN_MS = 3000

/** A subscription's outcome once it ends, or a failure naming the rule when it does not end in time. */
async function endedWithin<T> (done: Promise<T>, rule: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined
  const late = new Promise<never>((_resolve, reject) => {
    timer = setTimeout(() => reject(new Error(`not ended within ${WITHIN_MS} ms: ${rule}`)), WITHIN_MS)
  })
  try {
    return await Promise.race([done, late])
  } finally {
    clearTimeout(timer)
  }
}

test('a demoted ADMIN: its subscriptions end on WebSocket and SSE, and none starts again with the old token', async (t) => {
  const { url, app, token } = await listenTestApp(t)
  const adminToken = `Bearer ${token('1', 'ADMIN')}`
  const adminWs = wsClient(url, { authToken: adminToken })
  const adminSse = sseClient(url, adminToken)
  const userWs = wsClient(url, { authToken: `Bearer ${token('3')}` })
  t.teardown(() => { adminWs.dispose(); adminSse.dispose(); userWs.dispose() })
  const overWs = collect(adminWs, ROOM)
  const counting = collect(adminWs, 'subscription { count(target: 100) }')
  const overSse = collect(adminSse, ROOM)
  const bystander = collect(userWs, ROOM)
  await eventually(() => app.graphqlInspection.subscriptionStats().topicSubscribers === 3, 5000, 'three room subscribers')
  await eventually(() => counting.outcome.values.length > 0, 5000, 'count ticking')
  const post = (content: string) =>
    gql(url, 'mutation ($c: String!) { postMessage(roomId: "identity", content: $c) { id } }', { c: content }, {
      authorization: `Bearer ${token('4')}`
    })
  await post('before')
  await eventually(() => overWs.outcome.values.length === 1 && overSse.outcome.values.length === 1, 5000, 'the first event')
  t.equal(overWs.outcome.values[0].data.messageAdded.author.adminNotes, 'Prefers COBOL', 'as ADMIN, before')

  // Another administrator demotes user 1 (an HTTP request takes its own token's word).
  const demoted = await gql(url, 'mutation { updateUser(id: "1", input: { role: USER }) { id } }', undefined, {
    authorization: `Bearer ${token('9', 'ADMIN')}`
  })
  t.same(demoted.body.data, { updateUser: { id: '1' } })

  const [ws, count, sse] = await Promise.all([
    endedWithin(overWs.done, 'a demoted user\'s WebSocket subscription'),
    endedWithin(counting.done, 'a demoted user\'s count subscription'),
    endedWithin(overSse.done, 'a demoted user\'s SSE subscription')
  ])
  const message = "The user's role is now USER, not the token's ADMIN: use a new token"
  t.match(ws.error, [{ message, extensions: { code: 'FORBIDDEN' } }], 'WebSocket: an error for that id')
  t.match(count.error, [{ message, extensions: { code: 'FORBIDDEN' } }], 'count too')
  t.match(sse.values.at(-1), { errors: [{ message, extensions: { code: 'FORBIDDEN' } }] }, 'SSE: a next with the error')
  t.ok(sse.completed, 'SSE: then complete')
  t.equal(ws.values.length, 1, 'nothing more was sent with the old rights')

  // The same connection cannot start another with the old rights, nor can a new one with the old token.
  const again = await endedWithin(collect(adminWs, ROOM).done, 'a new subscription on the same connection')
  t.match(again.error, [{ message, extensions: { code: 'FORBIDDEN' } }], 'refused on the same connection')
  const fresh = wsClient(url, { authToken: adminToken })
  t.teardown(() => fresh.dispose())
  const refused = await endedWithin(collect(fresh, ROOM).done, 'a new connection with the old token')
  t.match(refused.error, [{ extensions: { code: 'FORBIDDEN' } }], 'refused on a new connection')
  const refusedSse = await endedWithin(collect(sseClient(url, adminToken), ROOM).done, 'a new SSE stream with the old token')
  t.match(refusedSse.values, [{ errors: [{ extensions: { code: 'FORBIDDEN' } }] }], 'refused over SSE')
  // A token for the new role is accepted.
  const asUser = wsClient(url, { authToken: `Bearer ${token('1')}` })
  t.teardown(() => asUser.dispose())
  const renewed = collect(asUser, ROOM)

  // Others are not affected.
  await eventually(() => app.graphqlInspection.subscriptionStats().topicSubscribers === 2, 5000, 'the bystander and the renewed one')
  await post('after')
  await eventually(
    () => bystander.outcome.values.length === 2 && renewed.outcome.values.length === 1,
    5000,
    'the bystander and the renewed subscriber get the next event'
  )
  t.same(renewed.outcome.values[0].data.messageAdded.author, { id: '4', email: null, adminNotes: null }, 'now as a USER')
  t.notOk(bystander.outcome.error)
})

test('a deleted user: its subscriptions end, UNAUTHENTICATED; a role written unchanged ends nothing', async (t) => {
  const { url, app, token } = await listenTestApp(t)
  const bearer = `Bearer ${token('3')}`
  const ws = wsClient(url, { authToken: bearer })
  const sse = sseClient(url, bearer)
  t.teardown(() => { ws.dispose(); sse.dispose() })
  const overWs = collect(ws, ROOM)
  const overSse = collect(sse, ROOM)
  await eventually(() => app.graphqlInspection.subscriptionStats().topicSubscribers === 2, 5000, 'two subscribers')
  const admin = { authorization: `Bearer ${token('1', 'ADMIN')}` }

  // The same role written again: the token still speaks for the user.
  const same = await gql(url, 'mutation { updateUser(id: "3", input: { role: USER }) { id } }', undefined, admin)
  t.same(same.body.data, { updateUser: { id: '3' } })
  await new Promise((resolve) => setTimeout(resolve, 300))
  t.equal(app.graphqlInspection.subscriptionStats().topicSubscribers, 2, 'a role written unchanged ends nothing')

  const deleted = await gql(url, 'mutation { deleteUser(id: "3") }', undefined, admin)
  t.same(deleted.body.data, { deleteUser: true })
  const [overWsEnd, overSseEnd] = await Promise.all([
    endedWithin(overWs.done, 'a deleted user\'s WebSocket subscription'),
    endedWithin(overSse.done, 'a deleted user\'s SSE subscription')
  ])
  const message = 'The user of this token no longer exists'
  t.match(overWsEnd.error, [{ message, extensions: { code: 'UNAUTHENTICATED' } }])
  t.match(overSseEnd.values.at(-1), { errors: [{ message, extensions: { code: 'UNAUTHENTICATED' } }] })
  t.equal(app.graphqlInspection.subscriptionStats().topicSubscribers, 0, 'they left the room')
  const again = await endedWithin(collect(ws, ROOM).done, 'a new subscription of a deleted user')
  t.match(again.error, [{ message, extensions: { code: 'UNAUTHENTICATED' } }], 'none starts again')
})
