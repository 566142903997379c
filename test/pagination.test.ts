// Cursor pagination through a real client: Apollo Client's relayStylePagination pages usersConnection
// (10000 users) and messagesConnection (a 5000-message room) on both stores, while rows are inserted
// and deleted between pages; every row is seen exactly once. Forged and foreign cursors are refused.
import { test } from 'tap'
import { ApolloClient, HttpLink, InMemoryCache, gql as apolloGql, type DocumentNode } from '@apollo/client'
import { relayStylePagination } from '@apollo/client/utilities'
import { countingStore } from './helpers/counting-store.ts'
import { gql, listenTestApp } from './helpers/app.ts'
import { STORE_KINDS, at, duplicates, emptyStore, seedRoom, seedUsers } from './helpers/paging.ts'

// Paging a large list is many requests in a minute: the rate limits are not under test here.
const ENV = { RATE_LIMIT_REQUESTS: '100000', RATE_LIMIT_COST: '100000000' }

const USERS = apolloGql`query Users($first: Int, $after: String) {
  usersConnection(first: $first, after: $after) { edges { cursor node { id name } } pageInfo { hasNextPage endCursor } }
}`
const MESSAGES = apolloGql`query Room($roomId: String!, $first: Int, $after: String, $last: Int, $before: String) {
  messagesConnection(roomId: $roomId, first: $first, after: $after, last: $last, before: $before) {
    edges { cursor node { id content author { id } } }
    pageInfo { hasNextPage endCursor hasPreviousPage startCursor }
  }
}`

function apolloClient (url: string) {
  return new ApolloClient({
    link: new HttpLink({ uri: `${url}/graphql` }),
    cache: new InMemoryCache({
      typePolicies: {
        Query: {
          fields: { usersConnection: relayStylePagination(), messagesConnection: relayStylePagination(['roomId']) }
        }
      }
    })
  })
}

interface Page {
  edges: { cursor: string; node: { id: string } }[]
  pageInfo: { hasNextPage?: boolean; endCursor?: string | null; hasPreviousPage?: boolean; startCursor?: string | null }
}

/**
 * Pages a connection to its end with one ObservableQuery and fetchMore, as an app does; `between`
 * runs after each page (with the ids of that page). Returns the ids of every page in the order read,
 * and the list Apollo's cache merged from them.
 */
async function pageThrough (
  client: ApolloClient,
  query: DocumentNode,
  field: string,
  variables: Record<string, unknown>,
  direction: 'forward' | 'backward',
  between: (ids: string[]) => Promise<void>
) {
  const observable = client.watchQuery<Record<string, Page>>({ query, variables, fetchPolicy: 'network-only' })
  const subscription = observable.subscribe(() => {})
  try {
    let page = (await observable.refetch()).data![field]!
    const read: string[] = []
    let pages = 0
    for (;;) {
      pages++
      const ids = page.edges.map((e) => e.node.id)
      // Backward pages arrive newest page first, each oldest first: read order is page by page.
      read.push(...ids)
      const more = direction === 'forward' ? page.pageInfo.hasNextPage : page.pageInfo.hasPreviousPage
      if (!more) break
      await between(ids)
      const cursor =
        direction === 'forward' ? { after: page.pageInfo.endCursor } : { before: page.pageInfo.startCursor }
      page = (await observable.fetchMore({ variables: cursor })).data![field]!
    }
    // What the app renders: the list relayStylePagination merged in the cache from every page.
    const merged = client.readQuery<Record<string, Page>>({ query, variables })![field]!.edges.map((e) => e.node.id)
    return { read, merged, pages }
  } finally {
    subscription.unsubscribe()
  }
}

for (const kind of STORE_KINDS) {
  test(`${kind}: Apollo Client pages through 10000 users while users are created and deleted; each seen exactly once`, async (t) => {
    const store = await emptyStore(t, kind, 'page_users')
    const initial = await seedUsers(store, 10000)
    const { url } = await listenTestApp(t, ENV, { store, demo: false })

    // Must be seen: every user present when the paging reaches its place. Must not: users deleted
    // before it got there, and users created behind the cursor.
    const mustSee = new Set(initial)
    const mustNotSee = new Set<string>()
    const seen = new Set<string>()
    let round = 0
    const { read, merged, pages } = await pageThrough(apolloClient(url), USERS, 'usersConnection', { first: 100 }, 'forward', async (ids) => {
      for (const id of ids) seen.add(id)
      round++
      // Ahead of the cursor: a row deleted is never seen; a row created after everything is seen once.
      const ahead = initial[100 * round + 300]
      if (ahead !== undefined && !seen.has(ahead) && (await store.deleteUser(ahead))) {
        mustSee.delete(ahead)
        mustNotSee.add(ahead)
      }
      mustSee.add(
        (
          await store.createUser({
            name: `late ${round}`,
            email: `late-${round}@example.com`,
            createdAt: at(100000 + round)
          })
        ).id
      )
      // Behind the cursor: deleting seen rows (the last one read, which the next cursor names, too)
      // and creating rows there shift nothing.
      await store.deleteUser(ids.at(-1)!)
      await store.deleteUser(ids[0]!)
      mustNotSee.add(
        (
          await store.createUser({
            name: `early ${round}`,
            email: `early-${round}@example.com`,
            createdAt: at(-1 - round)
          })
        ).id
      )
    })
    for (const id of read) seen.add(id)
    t.same(duplicates(read), [], 'no user seen twice')
    t.same([...mustSee].filter((id) => !seen.has(id)), [], 'every user present when its turn came was seen')
    t.same(
      read.filter((id) => mustNotSee.has(id)),
      [],
      'no user deleted before its turn, nor created behind the cursor'
    )
    t.ok(mustNotSee.size > 150, `${mustNotSee.size} users the paging must not see`)
    t.ok(pages >= 100, `${pages} pages`)
    t.same(merged, read, "Apollo's relayStylePagination merged the pages into the same list")
    t.end()
  })

  test(`${kind}: a 5000-message room, backward from the newest and forward from the oldest, while messages come and go`, async (t) => {
    const store = await emptyStore(t, kind, 'page_room')
    const authors = await seedUsers(store, 400, 'author')
    const [poster] = await seedUsers(store, 1, 'poster')
    const rows = await seedRoom(store, 'big', authors, 5000)
    const otherRoom = new Set((await seedRoom(store, 'other', authors, 300)).map((m) => m.id))
    const { url } = await listenTestApp(t, ENV, { store, demo: false })
    t.equal(rows.length, 5000)
    const authorOf = new Map(rows.map((m) => [m.id, m.authorId]))
    let deletions = 0

    for (const direction of ['backward', 'forward'] as const) {
      const expected = new Set((await store.messagesPage('big', 'after', null, 100000)).map((m) => m.id))
      const read: string[] = []
      const readSet = new Set<string>()
      const mustNotSee = new Set(otherRoom)
      /** Deletes an author, and so their messages all over the room: those not read yet will never be. */
      const deleteAuthorOf = async (messageId: string) => {
        const author = authorOf.get(messageId)
        if (!author || !(await store.deleteUser(author))) return
        deletions++
        for (const [id, by] of authorOf) {
          if (by === author && !readSet.has(id)) { expected.delete(id); mustNotSee.add(id) }
        }
      }
      const result = await pageThrough(apolloClient(url), MESSAGES, 'messagesConnection', direction === 'backward' ? { roomId: 'big', last: 100 } : { roomId: 'big', first: 100 }, direction, async (ids) => {
        read.push(...ids)
        for (const id of ids) readSet.add(id)
        // A message posted now lands at the newest end: ahead when paging forward, behind when backward.
        const posted = await store.createMessage({ roomId: 'big', content: 'new', authorId: poster! })
        if (direction === 'forward') expected.add(posted.id)
        // Another room's traffic never shows.
        mustNotSee.add((await store.createMessage({ roomId: 'other', content: 'elsewhere', authorId: poster! })).id)
        // Deleted while paging: the author of the message the next cursor names (that message goes),
        // and of a message further ahead.
        await deleteAuthorOf(direction === 'forward' ? ids.at(-1)! : ids[0]!)
        const ahead = [...expected].filter((id) => authorOf.has(id) && !readSet.has(id))
        const next = direction === 'forward' ? ahead[0] : ahead.at(-1)
        if (next !== undefined) await deleteAuthorOf(next)
      })
      for (const id of result.read.slice(read.length)) readSet.add(id)
      read.push(...result.read.slice(read.length))
      t.same(duplicates(read), [], `${direction}: no message seen twice`)
      t.same(
        [...expected].filter((id) => !readSet.has(id)),
        [],
        `${direction}: every message that existed when its turn came was seen`
      )
      t.same(
        read.filter((id) => mustNotSee.has(id)),
        [],
        `${direction}: nothing deleted before its turn, nor of another room`
      )
      t.same(
        [...result.merged].sort(byNumber),
        [...read].sort(byNumber),
        `${direction}: Apollo merged the same messages`
      )
      t.same(result.merged, [...result.merged].sort(byNumber), `${direction}: Apollo's list is oldest first`)
      t.ok(read.length > 1000, `${direction}: ${read.length} messages read`)
    }
    t.ok(deletions > 50, `${deletions} authors deleted while paging`)
    t.end()
  })
}

const byNumber = (a: string, b: string) => Number(a) - Number(b)

test('cursors are opaque and tamper-evident: forged, foreign, damaged and other-key cursors are BAD_USER_INPUT and read nothing', async (t) => {
  const { store, calls } = countingStore()
  const authors = await seedUsers(store, 30)
  await seedRoom(store, 'a', authors, 30)
  await seedRoom(store, 'b', authors, 30)
  const { url } = await listenTestApp(
    t,
    { CURSOR_SECRET: 'cursor-secret-for-this-test-0123456789abcdef' },
    { store, demo: false }
  )
  const other = await listenTestApp(
    t,
    { CURSOR_SECRET: 'another-cursor-secret-0123456789abcdefghijk' },
    { store, demo: false }
  )
  const users =
    'query ($after: String) { usersConnection(first: 5, after: $after) { edges { cursor node { id } } pageInfo { endCursor } } }'
  const room =
    'query ($room: String!, $after: String, $before: String, $first: Int, $last: Int) { messagesConnection(roomId: $room, first: $first, after: $after, last: $last, before: $before) { edges { node { id } } pageInfo { endCursor startCursor } } }'

  const userCursor = (await gql(url, users)).body.data.usersConnection.pageInfo.endCursor as string
  const roomCursor = (await gql(url, room, { room: 'a', first: 5 })).body.data.messagesConnection.pageInfo
    .endCursor as string
  t.match(userCursor, /^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]{22}$/, 'opaque: base64url payload and MAC')
  t.equal(
    (await gql(url, users, { after: userCursor })).body.data.usersConnection.edges.length,
    5,
    'a genuine cursor reads on'
  )

  const [payload, mac] = userCursor.split('.') as [string, string]
  const forgedPayload = Buffer.from(JSON.stringify(['2000-01-01T00:00:00.000Z', authors[0]])).toString('base64url')
  const flip = (s: string, i: number) => s.slice(0, i) + (s[i] === 'A' ? 'B' : 'A') + s.slice(i + 1)
  const refused: [string, string, Record<string, unknown>][] = [
    ['garbage', users, { after: 'not-a-cursor' }],
    ['empty', users, { after: '' }],
    ['a position of the client\'s choosing with a copied MAC', users, { after: `${forgedPayload}.${mac}` }],
    ['one character of the payload changed', users, { after: `${flip(payload, 3)}.${mac}` }],
    ['one character of the MAC changed', users, { after: `${payload}.${flip(mac, 5)}` }],
    ['the MAC spelled non-canonically', users, { after: `${payload}.${mac}=` }],
    ['three parts', users, { after: `${userCursor}.x` }],
    ['very long', users, { after: 'x'.repeat(999) }],
    ['a users cursor for messages', room, { room: 'a', first: 5, after: userCursor }],
    ['a cursor of room a for room b', room, { room: 'b', first: 5, after: roomCursor }],
    ['a cursor of room a as before for room b', room, { room: 'b', last: 5, before: roomCursor }],
    ['first with before', room, { room: 'a', first: 5, before: roomCursor }],
    ['first and last', room, { room: 'a', first: 5, last: 5 }]
  ]
  calls.length = 0
  for (const [label, query, variables] of refused) {
    const response = await gql(url, query, variables)
    t.equal(response.status, 200, label)
    t.equal(
      response.body.errors?.[0]?.extensions?.code,
      'BAD_USER_INPUT',
      `${label}: BAD_USER_INPUT (${response.body.errors?.[0]?.message})`
    )
    t.equal(response.body.data, null, `${label}: no rows`)
  }
  t.same(
    calls.filter((c) => c.method === 'usersAfter' || c.method === 'messagesPage'),
    [],
    'no refused cursor reached the store'
  )

  // A cursor signed with another key (another deployment, or before CURSOR_SECRET was rotated).
  const stale = await gql(other.url, users, { after: userCursor })
  t.match(stale.body.errors, [
    { message: 'Invalid after cursor: pass a cursor this list returned', extensions: { code: 'BAD_USER_INPUT' } }
  ])
  // Page sizes are capped like limit, before anything runs.
  for (const [variables, message] of [
    [{ room: 'a', first: 101 }, 'first must be between 1 and 100'],
    [{ room: 'a', last: 0 }, 'last must be between 1 and 100']
  ] as const) {
    t.match((await gql(url, room, variables)).body.errors, [{ message, extensions: { code: 'BAD_USER_INPUT' } }])
  }
})
