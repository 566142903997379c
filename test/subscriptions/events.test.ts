// What subscriptions emit, through the real graphql-ws client against a listening server: count's
// timing and completion; messageAdded's order, room filtering, author (through the loaders, fresh per
// event) and per-subscriber field rules.
import { test } from 'tap'
import { gql, listenTestApp } from '../helpers/app.ts'
import { collect, eventually, wsClient } from './clients.ts'

test('count emits 0 … target-1 about every second, then completes', async (t) => {
  const { url, token } = await listenTestApp(t)
  const client = wsClient(url, { authToken: `Bearer ${token('2')}` })
  t.teardown(() => client.dispose())
  const arrivals: number[] = []
  const started = Date.now()
  const outcome = await collect(client, 'subscription ($n: Int) { count(target: $n) }', { n: 4 }, () =>
    arrivals.push(Date.now())
  ).done
  const finished = Date.now()
  t.same(outcome.values.map((v: any) => v.data.count), [0, 1, 2, 3])
  t.ok(outcome.completed, 'the stream completes')
  const gaps = arrivals.map((at, i) => at - (i === 0 ? started : arrivals[i - 1]!))
  // Wide bounds: tests run in parallel on a loaded machine; the point is "about a second", not a burst.
  for (const gap of gaps.slice(1)) t.ok(gap >= 900 && gap <= 2000, `about a second between values (${gap} ms)`)
  t.ok(finished - arrivals[3]! < 500, 'completes right after the last value')

  const byDefault = await collect(client, 'subscription { count(target: 0) }').done
  t.same(byDefault.values, [], 'target 0 emits nothing')
  t.ok(byDefault.completed)
})

test('count without a target emits ten values', async (t) => {
  const { url } = await listenTestApp(t)
  const client = wsClient(url)
  t.teardown(() => client.dispose())
  const outcome = await collect(client, 'subscription { count }').done
  t.same(outcome.values.map((v: any) => v.data.count), [0, 1, 2, 3, 4, 5, 6, 7, 8, 9])
  t.ok(outcome.completed)
})

const ROOM_QUERY =
  'subscription ($room: String!) { messageAdded(roomId: $room) { id content author { id name email } } }'

test('messageAdded: every message of the room, in production order, and only that room', async (t) => {
  const { url, token, app } = await listenTestApp(t)
  const client = wsClient(url, { authToken: `Bearer ${token('2')}` })
  t.teardown(() => client.dispose())
  const red = collect(client, ROOM_QUERY, { room: 'red' })
  const blue = collect(client, ROOM_QUERY, { room: 'blue' })
  await eventually(
    () => app.graphqlInspection.subscriptionStats().webSocketSubscriptions === 2,
    3000,
    'both subscriptions live'
  )

  const posted: Record<string, string[]> = { red: [], blue: [] }
  for (let i = 0; i < 15; i++) {
    const room = i % 3 === 0 ? 'blue' : 'red'
    const { body } = await gql(url, 'mutation ($room: String!, $text: String!) { postMessage(roomId: $room, content: $text) { id } }',
      { room, text: `${room} ${i}` }, { authorization: `Bearer ${token(String(2 + (i % 3)))}` })
    posted[room]!.push(body.data.postMessage.id)
  }
  await eventually(() => red.outcome.values.length === 10 && blue.outcome.values.length === 5, 5000, 'all events')
  await new Promise((resolve) => setTimeout(resolve, 100))
  const ids = (values: any[]) => values.map((v) => v.data.messageAdded.id)
  t.same(ids(red.outcome.values), posted.red, 'red: all of its messages, in order')
  t.same(ids(blue.outcome.values), posted.blue, 'blue: all of its messages, in order')
  t.same(
    red.outcome.values.map((v: any) => v.data.messageAdded.content),
    posted.red.map((_, k) => `red ${[1, 2, 4, 5, 7, 8, 10, 11, 13, 14][k]}`)
  )
  // The author is resolved for each event.
  t.same(blue.outcome.values.map((v: any) => v.data.messageAdded.author.id), ['2', '2', '2', '2', '2'])
  t.same(red.outcome.values.map((v: any) => v.data.messageAdded.author.name).slice(0, 2), [
    'Alan Turing',
    'Grace Hopper'
  ])
})

test('field rules apply per subscriber: email only for the author and administrators', async (t) => {
  const { url, token, app } = await listenTestApp(t)
  const subscribers = {
    author: wsClient(url, { authToken: `Bearer ${token('2')}` }),
    other: wsClient(url, { authToken: `Bearer ${token('3')}` }),
    admin: wsClient(url, { authToken: `Bearer ${token('1', 'ADMIN')}` }),
    anonymous: wsClient(url)
  }
  const subs = Object.fromEntries(Object.entries(subscribers).map(([name, client]) => {
    t.teardown(() => client.dispose())
    return [name, collect(client, ROOM_QUERY, { room: 'shared' })]
  }))
  await eventually(
    () => app.graphqlInspection.subscriptionStats().webSocketSubscriptions === 4,
    3000,
    'four subscriptions live'
  )
  await gql(url, 'mutation { postMessage(roomId: "shared", content: "mine") { id } }', undefined, {
    authorization: `Bearer ${token('2')}`
  })
  await eventually(() => Object.values(subs).every((s) => s.outcome.values.length === 1), 3000, 'one event each')
  const [author, other, admin, anonymous] = ['author', 'other', 'admin', 'anonymous'].map(
    (name) => subs[name]!.outcome.values[0] as any
  )
  t.equal(author.data.messageAdded.author.email, 'ada@example.com')
  t.notOk(author.errors)
  t.equal(admin.data.messageAdded.author.email, 'ada@example.com')
  t.equal(other.data.messageAdded.author.email, null)
  t.match(other.errors, [
    {
      message: 'Not allowed to read this field',
      extensions: { code: 'FORBIDDEN' },
      path: ['messageAdded', 'author', 'email']
    }
  ])
  t.equal(anonymous.data.messageAdded.author.email, null)
  t.match(anonymous.errors, [{ message: 'Must be logged in', extensions: { code: 'UNAUTHENTICATED' } }])
})

test('each event reads the author afresh (no loader cache kept across events)', async (t) => {
  const { url, token, app, store } = await listenTestApp(t)
  const client = wsClient(url, { authToken: `Bearer ${token('3')}` })
  t.teardown(() => client.dispose())
  const sub = collect(client, ROOM_QUERY, { room: 'news' })
  await eventually(() => app.graphqlInspection.subscriptionStats().webSocketSubscriptions === 1, 3000, 'subscription live')
  const post = () =>
    gql(url, 'mutation { postMessage(roomId: "news", content: "x") { id } }', undefined, {
      authorization: `Bearer ${token('2')}`
    })
  await post()
  await eventually(() => sub.outcome.values.length === 1)
  await store.updateUser('2', { name: 'Ada King' })
  await post()
  await eventually(() => sub.outcome.values.length === 2)
  t.same(sub.outcome.values.map((v: any) => v.data.messageAdded.author.name), ['Ada Lovelace', 'Ada King'])
})
