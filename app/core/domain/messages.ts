// Message use cases, transport-free.
import { AppError } from '../errors.ts'
import type { MessageRow } from '../store/types.ts'
import { actions } from './authorization.ts'
import { assertBeforeDeadline, type DomainContext } from './context.ts'
import { assertPageSize, normalizeContent, normalizeRoomId } from './input.ts'
import { readPage, type Connection, type PageArgs } from './pages.ts'

export function listMessages (ctx: DomainContext, roomId: string, limit: number): Promise<MessageRow[]> {
  return ctx.loaders.messagesByRoom.load([normalizeRoomId(roomId), assertPageSize(limit, ctx.caps)])
}

/**
 * A page of a room's messages, oldest first within the page: `first`/`after` forward, `last`/`before`
 * backward; without a size, the newest page (as `messages` answers). Cursors are bound to the room.
 */
export async function listMessagesPage (
  ctx: DomainContext,
  roomId: string,
  args: PageArgs
): Promise<Connection<MessageRow>> {
  const room = normalizeRoomId(roomId)
  return readPage(
    ctx,
    'messages',
    room,
    args,
    (direction, from, limit) => ctx.store.messagesPage(room, direction, from, limit),
    'before'
  )
}

/** Posts as the caller (author = caller) and announces it to subscribers of the room. */
export async function postMessage (ctx: DomainContext, roomId: string, content: string): Promise<MessageRow> {
  const author = actions.postMessage(ctx.caller)
  const message = { roomId: normalizeRoomId(roomId), content: normalizeContent(content, ctx.caps), authorId: author.id }
  assertBeforeDeadline(ctx)
  let created: MessageRow
  try {
    created = await ctx.store.createMessage(message)
  } catch (err) {
    if (!(err instanceof AppError) && !(await userExists(ctx, author.id))) throw unknownUser()
    throw err
  }
  // The store told the caches before returning: a subscriber that reads the room on hearing of it
  // reads the new message.
  await ctx.events.publish({ type: 'messageAdded', message: created })
  return created
}

/**
 * A valid token whose `sub` the store does not know (the user was deleted after it was issued, or never
 * existed): the write failed on the author's foreign key. That is the credential's fault, not a server
 * error, so it is UNAUTHENTICATED (docs/errors.md). Asked only after a failed write: a post costs no
 * extra read, and a user deleted between a check and the insert cannot slip through as an internal error.
 */
const unknownUser = () => new AppError('UNAUTHENTICATED', 'The token names no user of this service')

async function userExists (ctx: DomainContext, id: string): Promise<boolean> {
  return (await ctx.store.usersByIds([id])).length > 0
}
