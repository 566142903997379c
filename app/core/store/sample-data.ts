// Realistic-looking users and messages, deterministic for a given seed, for the demo data set,
// `npm run seed` and the benchmark.
import type { NewMessage, NewUser, Store } from './types.ts'

const FIRST = ['Ada', 'Alan', 'Grace', 'Linus', 'Margaret', 'Dennis', 'Barbara', 'Ken', 'Frances', 'Edsger',
  'Radia', 'Tim', 'Katherine', 'Donald', 'Hedy', 'John', 'Annie', 'Niklaus', 'Sophie', 'Guido']
const LAST = ['Lovelace', 'Turing', 'Hopper', 'Torvalds', 'Hamilton', 'Ritchie', 'Liskov', 'Thompson', 'Allen',
  'Dijkstra', 'Perlman', 'Berners-Lee', 'Johnson', 'Knuth', 'Lamarr', 'McCarthy', 'Easley', 'Wirth', 'Wilson', 'van Rossum']
const ROOMS = ['general', 'random', 'support', 'releases', 'design']
const PHRASES = ['Deploy went out fine', 'Can someone review my change?', 'Lunch at noon?', 'The build is green again',
  'I pushed a fix for the login page', 'Who owns the billing service?', 'Standup moved to 10:15',
  'Latency looks better since the index', 'Reminder: retro tomorrow', 'Nice work on the release notes']

/** A small linear congruential generator: the same seed gives the same data set. */
function random (seed: number): () => number {
  let state = seed >>> 0
  return () => {
    state = (Math.imul(state, 1664525) + 1013904223) >>> 0
    return state / 2 ** 32
  }
}

export function sampleUsers (count: number, seed = 1, startAt = Date.UTC(2025, 0, 1)): NewUser[] {
  const next = random(seed)
  return Array.from({ length: count }, (_, i) => {
    const first = FIRST[Math.floor(next() * FIRST.length)]!
    const last = LAST[Math.floor(next() * LAST.length)]!
    return {
      name: `${first} ${last}`,
      email: `${first}.${last}.${seed}.${i + 1}@example.com`.toLowerCase().replace(/[^a-z0-9.@-]/g, ''),
      createdAt: new Date(startAt + i * 60_000).toISOString()
    }
  })
}

export function sampleMessages (
  count: number,
  authorIds: readonly string[],
  seed = 1,
  startAt = Date.UTC(2025, 6, 1)
): NewMessage[] {
  const next = random(seed + 7)
  return Array.from({ length: count }, (_, i) => ({
    roomId: ROOMS[Math.floor(next() * ROOMS.length)]!,
    content: PHRASES[Math.floor(next() * PHRASES.length)]!,
    authorId: authorIds[Math.floor(next() * authorIds.length)]!,
    createdAt: new Date(startAt + i * 1000).toISOString()
  }))
}

/** Inserts `users` users and `messages` messages in batches; returns the new user ids. */
export async function seed (
  store: Store,
  users: number,
  messages: number,
  seedValue = Date.now() % 100000
): Promise<string[]> {
  const ids: string[] = []
  for (const batch of chunks(sampleUsers(users, seedValue), 1000)) {
    ids.push(...(await store.insertUsers(batch)).map((u) => u.id))
  }
  if (ids.length > 0) {
    for (const batch of chunks(sampleMessages(messages, ids, seedValue), 5000)) await store.insertMessages(batch)
  }
  return ids
}

/**
 * The demo data set a new embedded store starts with (DEMO_DATA=false turns it off): an administrator,
 * a partner service account, three users and a few messages in the room `general`, so a newcomer's
 * first query returns something.
 */
export async function loadDemoData (store: Store): Promise<void> {
  if ((await store.countUsers()) > 0) return
  const [admin, ada, alan, grace] = await store.insertUsers([
    { id: '1', name: 'Admin', email: 'admin@example.com', role: 'ADMIN', adminNotes: 'Created by the demo data set' },
    { id: '2', name: 'Ada Lovelace', email: 'ada@example.com' },
    { id: '3', name: 'Alan Turing', email: 'alan@example.com' },
    { id: '4', name: 'Grace Hopper', email: 'grace@example.com', adminNotes: 'Prefers COBOL' },
    { id: '5', name: 'Partner Inc.', email: 'partner@example.com', role: 'SERVICE' }
  ])
  await store.insertMessages([
    { roomId: 'general', content: 'Welcome to the demo room', authorId: admin!.id },
    { roomId: 'general', content: 'Hello, world', authorId: ada!.id },
    { roomId: 'general', content: 'Can machines think?', authorId: alan!.id },
    { roomId: 'general', content: 'It is easier to ask forgiveness than permission', authorId: grace!.id }
  ])
}

function * chunks<T> (items: readonly T[], size: number): Generator<T[]> {
  for (let i = 0; i < items.length; i += size) yield items.slice(i, i + size)
}
