// Types for the Mercurius 16 modules the subscription transports reuse (no exports map, so deep
// requires are allowed; these modules ship no typings). Only what app/graphql/ws-connection.ts and
// app/graphql/sse-handler.ts touch is declared.

declare module 'mercurius/lib/subscription-connection.js' {
  import type { WebSocket } from 'ws'

  export interface ExecuteSubscriptionArgs {
    document: import('graphql').DocumentNode
    query: string
    context: Record<string, unknown>
    variables: Record<string, unknown> | undefined
    operationName: string | null
    id: string
  }

  export default class SubscriptionConnection {
    constructor (socket: WebSocket, options: Record<string, unknown>)
    socket: WebSocket
    context: Record<string, any>
    isReady: boolean
    protocolMessageTypes: Record<string, string | undefined>
    subscriptionContexts: Map<string, { close (): unknown }>
    subscriptionIters: Map<string, unknown>
    handleMessage (message: Buffer, isBinary: boolean): Promise<void>
    handleConnectionInit (data: { type: string; payload?: unknown }): Promise<void>
    handleGQLStart (data: { id: string; payload?: any }): Promise<void>
    _executeSubscription (args: ExecuteSubscriptionArgs): Promise<void>
    handleGQLStop (data: { id: string }): Promise<void>
    handleGQLComplete (id: string): void
    handleConnectionClose (): void
    sendMessage (type: string | undefined, id?: string, payload?: unknown): Promise<void>
    sendError (err: unknown, id: string | null): void
  }
}

declare module 'mercurius/lib/subscription-protocol.js' {
  export const GRAPHQL_WS: 'graphql-ws'
  export const GRAPHQL_TRANSPORT_WS: 'graphql-transport-ws'
}

declare module 'mercurius/lib/subscriber.js' {
  export class SubscriptionContext {
    constructor (options: { pubsub: unknown; fastify: unknown; queueHighWaterMark?: number })
    closed: boolean
    subscribe (topics: string | string[]): Promise<AsyncIterable<unknown>>
    close (): boolean
  }
}

declare module 'mercurius/lib/hooks.js' {
  export function assignLifeCycleHooksToContext<T extends object> (context: T, hooks: unknown): T
}

declare module 'mercurius/lib/symbols.js' {
  const symbols: { kHooks: symbol }
  export default symbols
}
