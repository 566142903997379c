// Thin adapters from GraphQL fields to domain functions. No rule lives here.
import type { IResolvers } from 'mercurius'
import * as messages from '../../app/domain/messages.ts'
import * as users from '../../app/domain/users.ts'
import type { MessageRow } from '../../app/store/types.ts'
import type { GraphQLContext } from './context.ts'

type Args = Record<string, any>

export const resolvers: IResolvers = {
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
