// Message use cases, transport-free.
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
export function listMessagesPage (ctx: DomainContext, roomId: string, args: PageArgs): Promise<Connection<MessageRow>> {
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
  const created = await ctx.store.createMessage(message)
  await ctx.events.publish({ type: 'messageAdded', message: created })
  return created
}
