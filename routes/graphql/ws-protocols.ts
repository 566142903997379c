// The two WebSocket subprotocols the GraphQL routes speak, as data: each one's message types, the frames the
// server sends as they are, its close codes, and the few rules where they differ. The session
// (websocket.ts) speaks either through this table and never names a message type itself.
//
// - graphql-transport-ws: graphql-ws's PROTOCOL.md, with the library's exported constants and message
//   parser, so it stays what graphql-ws's clients expect.
// - graphql-ws (legacy): subscriptions-transport-ws's protocol (Apollo's first, still sent by older
//   clients). Its own words and numbers, written out here: where they equal graphql-transport-ws's, it
//   is because the legacy servers this service replaces answered so, not because they are shared.
import {
  CloseCode,
  DEPRECATED_GRAPHQL_WS_PROTOCOL,
  GRAPHQL_TRANSPORT_WS_PROTOCOL,
  MessageType,
  parseMessage
} from 'graphql-ws'

export const SUBPROTOCOLS = [GRAPHQL_TRANSPORT_WS_PROTOCOL, DEPRECATED_GRAPHQL_WS_PROTOCOL] as const

/** A message from the client, in either subprotocol's words. */
export interface Incoming { type: string; id?: string; payload?: unknown }

/** The close codes a session sends for a client's protocol mistakes. */
export interface ProtocolCloseCodes {
  /** A frame that is not a message of the protocol. */
  badRequest: number
  /** An operation before the connection was acknowledged. */
  unauthorized: number
  /** Refused credentials, or a token that expired. */
  forbidden: number
  initialisationTimeout: number
  /** An operation id already in use on the connection. */
  duplicateId: number
  tooManyInitialisations: number
  internalError: number
}

/** What a subprotocol-specific message may do to its session. */
export interface SessionReply {
  send (data: string): void
  close (code: number, reason: string): void
}

/** What differs between the two subprotocols: message names, close codes and a few rules. */
export interface Dialect {
  /** Parses a frame (throws with the reason to close `close.badRequest` with). */
  parse (data: string): Incoming
  init: string
  ack: string
  start: string
  /** The client ends one operation. */
  stop: string
  /** An operation's result (wrapped around an answer already serialised). */
  next: string
  /** An operation ended by the server with errors, and without. */
  error: string
  complete: string
  keepAlive: string
  close: ProtocolCloseCodes
  /** A refused connection_init: what is sent before the close (legacy: connection_error). */
  refusal? (reason: string): string
  /** Sent right after the ack (legacy: a first `ka`). */
  afterAck?: string
  /** When the init timeout is lifted: at connection_init (legacy) or at the ack (graphql-transport-ws). */
  initWaitsFor: 'init' | 'ack'
  /** Answers a message only this subprotocol has (ping, connection_terminate); false when unknown. */
  other (message: Incoming, session: SessionReply): boolean
}

export const transportWs: Dialect = {
  // graphql-ws's own validation: shapes and types of every message of its protocol.
  parse: (data) => {
    const message = parseMessage(data)
    return {
      type: message.type,
      id: 'id' in message ? message.id : undefined,
      payload: 'payload' in message ? message.payload : undefined
    }
  },
  init: MessageType.ConnectionInit,
  ack: JSON.stringify({ type: MessageType.ConnectionAck }),
  start: MessageType.Subscribe,
  stop: MessageType.Complete,
  next: MessageType.Next,
  error: MessageType.Error,
  complete: MessageType.Complete,
  keepAlive: JSON.stringify({ type: MessageType.Ping }),
  close: {
    badRequest: CloseCode.BadRequest,
    unauthorized: CloseCode.Unauthorized,
    forbidden: CloseCode.Forbidden,
    initialisationTimeout: CloseCode.ConnectionInitialisationTimeout,
    duplicateId: CloseCode.SubscriberAlreadyExists,
    tooManyInitialisations: CloseCode.TooManyInitialisationRequests,
    internalError: CloseCode.InternalServerError
  },
  initWaitsFor: 'ack',
  other (message, session) {
    if (message.type === MessageType.Ping) {
      // Answered like graphql-ws does (its payload echoed); the frame has paid its budget already.
      session.send(
        JSON.stringify(
          message.payload === undefined
            ? { type: MessageType.Pong }
            : { type: MessageType.Pong, payload: message.payload }
        )
      )
      return true
    }
    return message.type === MessageType.Pong
  }
}

export const legacyWs: Dialect = {
  parse: (data) => {
    let message: unknown
    try {
      message = JSON.parse(data)
    } catch {
      throw new Error('Invalid message: not JSON')
    }
    const { type, id, payload } = (message ?? {}) as { type?: unknown; id?: unknown; payload?: unknown }
    if (typeof type !== 'string') throw new Error(`Invalid message type ${JSON.stringify(type) ?? 'undefined'}`)
    if (type === 'start' && (typeof id !== 'string' || id === '')) {
      throw new Error('Invalid message: id must be a non-empty string')
    }
    return {
      type,
      id: id === undefined ? undefined : String(id),
      payload: type === 'start' && (payload === null || typeof payload !== 'object') ? {} : payload
    }
  },
  init: 'connection_init',
  ack: JSON.stringify({ type: 'connection_ack' }),
  start: 'start',
  stop: 'stop',
  next: 'data',
  error: 'error',
  complete: 'complete',
  keepAlive: JSON.stringify({ type: 'ka' }),
  close: {
    badRequest: 4400,
    unauthorized: 4401,
    forbidden: 4403,
    initialisationTimeout: 4408,
    duplicateId: 4409,
    tooManyInitialisations: 4429,
    internalError: 4500
  },
  refusal: (reason) => JSON.stringify({ type: 'connection_error', payload: { message: reason } }),
  afterAck: JSON.stringify({ type: 'ka' }),
  initWaitsFor: 'init',
  other (message, session) {
    if (message.type !== 'connection_terminate') return false
    session.close(1000, 'Normal closure')
    return true
  }
}

/** The subprotocol a socket agreed (a client naming none speaks graphql-transport-ws). */
export function dialectOf (protocol: string): Dialect {
  return protocol === DEPRECATED_GRAPHQL_WS_PROTOCOL ? legacyWs : transportWs
}
