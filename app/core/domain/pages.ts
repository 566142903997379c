// Cursor (keyset) pages, the Relay connection shape every transport pages with: GraphQL's
// usersConnection/messagesConnection and SOAP's ListUsers page tokens.
//
// A page is read from a position, the (createdAt, id) of the row the client saw last, never from an
// offset: rows inserted or deleted elsewhere do not shift what comes next, and a page costs one index
// range (LIMIT n + 1, the extra row telling whether there is more) whatever the table's size.
//
// A cursor is that position, signed: base64url(JSON [createdAt, id]) "." base64url(HMAC-SHA-256, 16
// bytes) under a key derived from the configured secret, over the kind of list and its scope (the room)
// as well as the position. A cursor the service did not make, one made for another list or room, one
// signed with a previous key, or a damaged one is refused with BAD_USER_INPUT before any read.
import { createHmac, hkdfSync, timingSafeEqual } from 'node:crypto'
import { badInput } from '../errors.ts'
import type { Direction, Position } from '../store/types.ts'
import type { DomainContext } from './context.ts'
import { DEFAULT_PAGE_SIZE, assertPageSize } from './input.ts'

export type ListKind = 'users' | 'messages'

export interface PageArgs {
  first?: number | null
  after?: string | null
  last?: number | null
  before?: string | null
}

export interface PageInfo {
  hasNextPage: boolean
  hasPreviousPage: boolean
  startCursor: string | null
  endCursor: string | null
}

export interface Connection<T extends Position> {
  edges: Edge<T>[]
  pageInfo: PageInfo
}

/** The HMAC key of cursors, derived from the configured secret under a label of its own (no other use shares it). */
export function cursorKey (secret: string): Buffer {
  return Buffer.from(hkdfSync('sha256', secret, '', 'graphql-query-service page cursors v1', 32))
}

const MAC_BYTES = 16
/** Longer than any cursor the service makes (an ISO date, an id within the string cap, the MAC). */
const MAX_CURSOR_LENGTH = 2048
const ISO_MS = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/
const MESSAGE_ID = /^[1-9]\d{0,17}$/

interface List {
  kind: ListKind
  /** What else the cursor is bound to: the room of a message list. */
  scope: string
  key: Buffer
}

function mac (list: List, payload: string): Buffer {
  return createHmac('sha256', list.key)
    .update(`${list.kind}\n${list.scope}\n${payload}`)
    .digest()
    .subarray(0, MAC_BYTES)
}

function encodeCursor (list: List, row: Position): string {
  const payload = Buffer.from(JSON.stringify([row.createdAt, row.id])).toString('base64url')
  return `${payload}.${mac(list, payload).toString('base64url')}`
}

function invalidCursor (field: string): Error {
  return badInput(`Invalid ${field} cursor: pass a cursor this list returned`, { field })
}

/** The position a cursor names; BAD_USER_INPUT for anything the service did not sign for this list. */
function decodeCursor (list: List, cursor: string, field: string): Position {
  if (cursor.length > MAX_CURSOR_LENGTH) throw invalidCursor(field)
  const [payload, signature, extra] = cursor.split('.')
  if (payload === undefined || signature === undefined || extra !== undefined) throw invalidCursor(field)
  const given = Buffer.from(signature, 'base64url')
  // Base64url decoding skips what it cannot read: only the canonical spelling of the MAC is accepted.
  if (
    given.length !== MAC_BYTES ||
    given.toString('base64url') !== signature ||
    !timingSafeEqual(given, mac(list, payload))
  ) {
    throw invalidCursor(field)
  }
  let position: unknown
  try { position = JSON.parse(Buffer.from(payload, 'base64url').toString('utf8')) } catch { throw invalidCursor(field) }
  if (!Array.isArray(position) || position.length !== 2) throw invalidCursor(field)
  const [createdAt, id] = position as unknown[]
  // Signed by us, so well formed; checked anyway, the store must never see a value of another shape.
  if (typeof createdAt !== 'string' || !ISO_MS.test(createdAt) || typeof id !== 'string') throw invalidCursor(field)
  if (list.kind === 'messages' && !MESSAGE_ID.test(id)) throw invalidCursor(field)
  return { createdAt, id }
}

/** An edge whose cursor is signed only when a client asks for it (most pages ask for two, pageInfo's). */
class Edge<T extends Position> {
  readonly node: T
  readonly #list: List

  constructor (list: List, node: T) {
    this.node = node
    this.#list = list
  }

  get cursor (): string {
    return encodeCursor(this.#list, this.node)
  }
}

/** Reads `limit` rows (plus one) from a position in a direction; a store method bound to its list. */
export type PageReader<T> = (direction: Direction, from: Position | null, limit: number) => Promise<T[]>

/**
 * One page of a list by the Relay arguments: `first` (after `after`) reads forward, `last` (before
 * `before`) backward; edges are always oldest first. Without either size the list's default
 * direction reads DEFAULT_PAGE_SIZE rows. Mixing the two directions is refused.
 */
export async function readPage<T extends Position> (
  ctx: DomainContext, kind: ListKind, scope: string, args: PageArgs, read: PageReader<T>, defaultDirection: Direction = 'after'
): Promise<Connection<T>> {
  const { first, after, last, before } = args
  if (first != null && last != null) throw badInput('Pass first or last, not both', { field: 'last' })
  if ((first != null && before != null) || (last != null && after != null) || (after != null && before != null)) {
    throw badInput('Page forward with first and after, or backward with last and before', {
      field: after != null ? 'after' : 'before'
    })
  }
  const direction: Direction =
    last != null || before != null ? 'before' : first != null || after != null ? 'after' : defaultDirection
  const size = direction === 'after'
    ? assertPageSize(first ?? DEFAULT_PAGE_SIZE, ctx.caps, 'first')
    : assertPageSize(last ?? DEFAULT_PAGE_SIZE, ctx.caps, 'last')
  const list: List = { kind, scope, key: ctx.cursorKey }
  const cursor = direction === 'after' ? after : before
  const from = cursor != null ? decodeCursor(list, cursor, direction) : null

  const rows = await read(direction, from, size + 1)
  const more = rows.length > size
  if (more) rows.length = size
  if (direction === 'before') rows.reverse()
  const edges = rows.map((row) => new Edge(list, row))
  return {
    edges,
    pageInfo: {
      // Relay allows false for the side a client does not page towards: it is not known without another read.
      hasNextPage: direction === 'after' && more,
      hasPreviousPage: direction === 'before' && more,
      startCursor: edges[0]?.cursor ?? null,
      endCursor: edges.at(-1)?.cursor ?? null
    }
  }
}
