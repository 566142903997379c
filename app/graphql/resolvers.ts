// Thin adapters from GraphQL fields to domain functions. No rule lives here.
import * as messages from '../core/domain/messages.ts'
import * as users from '../core/domain/users.ts'
import type { MessageRow } from '../core/store/types.ts'
import type { GraphQLContext } from './context.ts'

type Args = Record<string, any>

/** Resolvers by type and field, in the shape graphql-tools and Mercurius take them. */
export type Resolvers = Record<string, Record<string, (parent: any, args: Args, ctx: GraphQLContext) => unknown>>

export const resolvers: Resolvers = {
  Query: {
    user: (_: unknown, { id }: Args, ctx: GraphQLContext) => users.getUser(ctx.domain, id),
    users: (_: unknown, { limit }: Args, ctx: GraphQLContext) => users.listUsers(ctx.domain, limit),
    usersByIds: (_: unknown, { ids }: Args, ctx: GraphQLContext) => users.getUsers(ctx.domain, ids),
    messages: (_: unknown, { roomId, limit }: Args, ctx: GraphQLContext) =>
      messages.listMessages(ctx.domain, roomId, limit),
    usersConnection: (_: unknown, args: Args, ctx: GraphQLContext) => users.listUsersPage(ctx.domain, args),
    messagesConnection: (_: unknown, { roomId, ...page }: Args, ctx: GraphQLContext) =>
      messages.listMessagesPage(ctx.domain, roomId, page)
  },
  // A message's author comes from the request's user loader: the authors of a page of messages are
  // requested in the same tick and read in one batch.
  Message: {
    author: (message: MessageRow, _: Args, ctx: GraphQLContext) => ctx.domain.loaders.userById.load(message.authorId)
  },
  Mutation: {
    createUser: (_: unknown, { input }: Args, ctx: GraphQLContext) => users.createUser(ctx.domain, input),
    updateUser: (_: unknown, { id, input }: Args, ctx: GraphQLContext) => users.updateUser(ctx.domain, id, input),
    deleteUser: (_: unknown, { id }: Args, ctx: GraphQLContext) => users.deleteUser(ctx.domain, id),
    postMessage: (_: unknown, { roomId, content }: Args, ctx: GraphQLContext) =>
      messages.postMessage(ctx.domain, roomId, content)
  }
}
