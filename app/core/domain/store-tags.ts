// What every store call reads and changes, as read tags (read-tags.ts): the one place the response cache
// learns of the service's data. Each Store method is declared here as a read (the tags of every row it
// read, look-ahead rows included), a write (the tags it changes, cascades included), or unrelated to any
// answer (credentials, health): a method added to the Store interface without a declaration fails the
// type-check, and `tellingChanges` refuses a store with an undeclared method at start.
//
// Two wrappers apply the declarations:
// - `tellingChanges` (built once by the composition root): every write tells the invalidation port its
//   tags before storing (a cache that cannot be told refuses the write with nothing changed) and, once
//   stored, before it returns (a change is never acknowledged while an old answer may be served);
// - `recordingReads` (built per cacheable request by createDomainContext): every read adds its tags to
//   the request's ReadSet, whichever domain function or loader made it.
import { AppError } from '../errors.ts'
import type { MessageRow, Store } from '../store/types.ts'
import { readTags, type ReadSet } from './read-tags.ts'

/**
 * Told of every write, with the read tags (read-tags.ts) it changes: before it is made and before it is
 * acknowledged (`tellingChanges`, around every store write). The response cache drops the
 * answers that read them, on every instance. A failure rejects, and the write's caller gets
 * SERVICE_UNAVAILABLE: a write is never acknowledged while an old answer may still be served.
 */
export interface Invalidation {
  invalidate (tags: readonly string[]): Promise<void>
}

type Method = Exclude<keyof Store, 'kind'>
type Args<M extends Method> = Parameters<Store[M]>
type Result<M extends Method> = Awaited<ReturnType<Store[M]>>

interface ReadDeclaration<M extends Method> {
  kind: 'read'
  /** The tags of what the call read, from its arguments and its rows. */
  tags (args: Args<M>, result: Result<M>): Iterable<string>
}

interface WriteDeclaration<M extends Method> {
  kind: 'write'
  /** The tags the write will change, known from its arguments: told before storing. */
  before (args: Args<M>): readonly string[]
  /** The tags it changed, told once stored; empty when it changed nothing (a missing row). */
  after (args: Args<M>, result: Result<M>): readonly string[]
}

interface UnrelatedDeclaration {
  kind: 'unrelated'
  /** Why no answer the cache keeps can depend on this call. */
  why: string
}

type Declaration<M extends Method> = ReadDeclaration<M> | WriteDeclaration<M> | UnrelatedDeclaration

const USER_LIST = [readTags.users, readTags.usersTable] as const

/** A room read: the room, and the author of every message read (deleting a user deletes their messages). */
function roomRead (roomId: string, rows: readonly MessageRow[]): string[] {
  const tags = [readTags.room(roomId), readTags.messagesTable]
  for (const row of rows) tags.push(readTags.user(row.authorId))
  return tags
}

const unrelated = (why: string): UnrelatedDeclaration => ({ kind: 'unrelated', why })
const credentials = unrelated('partner credentials and certificates: no GraphQL field shows them, and SOAP answers are not cached')
const deployments = unrelated('app deployments: which persisted operations the service runs, not data an answer shows')

export const storeTags: { readonly [M in Method]: Declaration<M> } = {
  // Every id asked for, found or not: a missing user becomes a found one once created.
  usersByIds: { kind: 'read', tags: ([ids]) => [...ids.map(readTags.user), readTags.usersTable] },
  // A list or page of users, empty or not (the page's look-ahead row is one of the users it read).
  listUsers: { kind: 'read', tags: () => USER_LIST },
  usersAfter: { kind: 'read', tags: () => USER_LIST },
  countUsers: { kind: 'read', tags: () => USER_LIST },
  // Every row read, the look-ahead row (the one that decides hasNextPage/hasPreviousPage) included.
  messagesByRoom: { kind: 'read', tags: ([roomId], rows) => roomRead(roomId, rows) },
  messagesPage: { kind: 'read', tags: ([roomId], rows) => roomRead(roomId, rows) },

  createUser: {
    kind: 'write',
    before: () => [readTags.users],
    after: (_, created) => [readTags.users, readTags.user(created.id)]
  },
  insertUsers: {
    kind: 'write',
    before: () => [readTags.users],
    after: (_, created) => [readTags.users, ...created.map((user) => readTags.user(user.id))]
  },
  updateUser: {
    kind: 'write',
    before: ([id]) => [readTags.user(id), readTags.users],
    after: ([id], updated) => (updated ? [readTags.user(id), readTags.users] : [])
  },
  // The store cascades: the user's messages go too, so the rooms they were in change.
  deleteUser: {
    kind: 'write',
    before: ([id]) => [readTags.user(id), readTags.users],
    after: ([id], deleted) => (deleted ? [readTags.user(id), readTags.users, ...deleted.rooms.map(readTags.room)] : [])
  },
  createMessage: {
    kind: 'write',
    before: ([message]) => [readTags.room(message.roomId)],
    after: (_, created) => [readTags.room(created.roomId)]
  },
  insertMessages: {
    kind: 'write',
    before: ([messages]) => roomsOf(messages),
    after: ([messages]) => roomsOf(messages)
  },

  findCredentials: credentials,
  setCredentials: credentials,
  listPartners: credentials,
  removePartner: credentials,
  findCertificate: credentials,
  findCertificateByThumbprint: credentials,
  findCertificateByIssuerSerial: credentials,
  certificatesOf: credentials,
  replaceCertificates: credentials,
  publishDeployment: deployments,
  retireDeployment: deployments,
  listDeployments: deployments,
  deploymentOperations: deployments,
  recordUsage: deployments,
  recordServiceInstance: deployments,
  forgetServiceInstance: deployments,
  serviceProfiles: deployments,
  watchChanges: unrelated('reports changes made elsewhere; reads and writes nothing itself'),
  ping: unrelated('reads no data'),
  close: unrelated('reads no data')
}

function roomsOf (messages: ReadonlyArray<{ roomId: string }>): string[] {
  return [...new Set(messages.map((message) => readTags.room(message.roomId)))]
}

/** A declaration as the wrappers call it: with a call's arguments and result, whatever the method. */
type AnyDeclaration =
  | { kind: 'read'; tags (args: unknown[], result: unknown): Iterable<string> }
  | { kind: 'write'; before (args: unknown[]): readonly string[]; after (args: unknown[], result: unknown): readonly string[] }
  | UnrelatedDeclaration

const declarationOf = (name: string): AnyDeclaration | undefined =>
  Object.hasOwn(storeTags, name) ? (storeTags[name as Method] as unknown as AnyDeclaration) : undefined

/** Every method of `store` has a declaration; throws naming the first that has none. */
export function assertDeclared (store: Store): void {
  for (const [name, value] of Object.entries(store)) {
    if (typeof value === 'function' && !declarationOf(name)) {
      throw new Error(`Store method ${name} declares neither what it reads nor what it changes (app/core/domain/store-tags.ts)`)
    }
  }
}

const NOTHING_CHANGED = 'Nothing was changed: the response cache is unavailable; retry shortly'
const NOT_ACKNOWLEDGED =
  'The change was made, but the response cache could not be told of it: reads may show the old value until their cached answers expire. Do not repeat the change'

async function tell (invalidation: Invalidation, tags: readonly string[], failure: string): Promise<void> {
  if (tags.length === 0) return
  try {
    await invalidation.invalidate(tags)
  } catch {
    throw new AppError('SERVICE_UNAVAILABLE', failure)
  }
}

function innerCall (store: Store, name: string, args: unknown[]): unknown {
  return (store[name as Method] as (...a: unknown[]) => unknown).apply(store, args)
}

/**
 * The store whose every write tells `invalidation` what it changes, before storing and before
 * returning; reads pass through untouched. Without an invalidation port (nothing caches answers), the
 * store itself, once checked.
 */
export function tellingChanges (store: Store, invalidation: Invalidation | undefined): Store {
  assertDeclared(store)
  if (!invalidation) return store
  // Over the store itself (its methods looked up at each call), so it stays the store a test replaces
  // a method of; only the writes are its own.
  const telling = Object.create(store) as Record<string, unknown>
  for (const name of Object.keys(store)) {
    const declaration = declarationOf(name)
    if (declaration?.kind !== 'write') continue
    telling[name] = async (...args: unknown[]) => {
      await tell(invalidation, declaration.before(args), NOTHING_CHANGED)
      const result = await innerCall(store, name, args)
      await tell(invalidation, declaration.after(args, result), NOT_ACKNOWLEDGED)
      return result
    }
  }
  return telling as unknown as Store
}

/**
 * The prototype of recording stores, built once: a request that records pays one object, not a closure
 * per method. Reads add their tags to `reads`; everything else goes to the inner store as it is.
 */
const recordingPrototype: Record<string, unknown> = {}
for (const name of Object.keys(storeTags)) {
  const declaration = declarationOf(name)!
  recordingPrototype[name] = declaration.kind === 'read'
    ? async function (this: Recording, ...args: unknown[]) {
      const result = await innerCall(this.inner, name, args)
      for (const tag of declaration.tags(args, result)) this.reads.add(tag)
      return result
    }
    : function (this: Recording, ...args: unknown[]) {
      return innerCall(this.inner, name, args)
    }
}

interface Recording {
  inner: Store
  reads: ReadSet
}

/** `store` recording the tags of every read into `reads` (one request's, for the response cache). */
export function recordingReads (store: Store, reads: ReadSet): Store {
  const recording = Object.create(recordingPrototype) as Recording & { kind: Store['kind'] }
  recording.inner = store
  recording.reads = reads
  recording.kind = store.kind
  return recording as unknown as Store
}
