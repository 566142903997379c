// Subscriptions' carriers: WebSocket connections and event streams (SSE). The limits of a subscriber hold
// for both; the WebSocket protocol's own limits (its handshake, frames, keep-alives) are grouped apart.
import { area, list } from './area.ts'
import { cors } from './browsers.ts'

export const streaming = area({
  key: 'streaming',
  title: 'Subscriptions: WebSockets and event streams',
  about: 'The first four hold for WebSocket connections and event streams (SSE) alike (`WS_MAX_CONNECTIONS_PER_CLIENT` too, whatever its name says); the other `WS_*` settings are the WebSocket protocol\'s own.',
  uses: [cors],
  settings: {
    WS_MAX_CONNECTIONS_PER_CLIENT: { type: 'integer', minimum: 1, default: 50, doc: 'WebSocket and event-stream connections per IP (HTTP 429 before the upgrade) and per user (close 1013), per instance' },
    SUBSCRIPTIONS_MAX_PER_CALLER: { type: 'integer', minimum: 1, default: 100, doc: 'active subscriptions per user (or IP when anonymous) across connections, WS and SSE' },
    SUBSCRIBER_MAX_BUFFERED_BYTES: { type: 'integer', minimum: 65536, default: 4194304, doc: 'unsent bytes (every frame counted: events, pongs, keep-alives, errors) past which a connection or stream that stopped reading is closed (WS 4503; SSE cut)' },
    SUBSCRIBER_MAX_LIFETIME_MS: { type: 'integer', minimum: 0, default: 3600000, doc: 'longest life of a WebSocket connection or an event stream, less up to a tenth at random (WS: close 1001 `Connection lifetime ended`; SSE: the stream ends without `complete`); clients reconnect and subscribe again; 0 = no limit. A token\'s `exp` ends them sooner (4403; SSE: `UNAUTHENTICATED` then `complete`). An hour: anonymous connections have no `exp`, and a connection that never ends stays on the instance it first reached after deploys and scale-outs; one reconnection an hour costs nothing, and the random tenth spreads those of clients that connected together' },
    WS_ALLOWED_ORIGINS: { type: 'string', default: '', doc: 'comma-separated Origins allowed for WebSockets besides CORS_ORIGINS (which allows both); both empty = only clients that send no Origin' },
    WS_INIT_TIMEOUT_MS: { type: 'integer', minimum: 1, default: 3000, doc: '`connection_init` must arrive within this (else close 4408)' },
    WS_MAX_SUBSCRIPTIONS_PER_CONNECTION: { type: 'integer', minimum: 1, default: 20, doc: 'active subscriptions on one WebSocket (`RATE_LIMITED` beyond)' },
    WS_MAX_MESSAGE_BYTES: { type: 'integer', minimum: 256, default: 65536, doc: 'largest WebSocket message (close 1009)' },
    WS_KEEP_ALIVE_MS: { type: 'integer', minimum: 0, default: 15000, doc: 'ping (graphql-transport-ws) / ka (graphql-ws) on idle connections; 0 = off' },
    WS_MAX_MESSAGES_PER_SECOND: { type: 'integer', minimum: 1, default: 100, doc: 'frames (pings included) one WebSocket may send a second on average (a token bucket holding one second\'s worth: bursts up to it pass); over it: close 1008' },
    WS_MAX_RECEIVED_BYTES_PER_SECOND: { type: 'integer', minimum: 1024, default: 1048576, doc: 'bytes one WebSocket may send a second on average (likewise a bucket of one second\'s worth); over it: close 1008' }
  },
  read: (e, { cors }) => ({
    /** WebSocket connections and event streams per client address and per user, on this instance. */
    maxConnectionsPerClient: e.WS_MAX_CONNECTIONS_PER_CLIENT,
    /** Active subscriptions of one caller (user, or IP when anonymous) across its connections and streams. */
    maxSubscriptionsPerCaller: e.SUBSCRIPTIONS_MAX_PER_CALLER,
    /** Unsent bytes past which a subscriber (WebSocket or event stream) is closed: it stopped reading. */
    maxBufferedBytesPerSubscriber: e.SUBSCRIBER_MAX_BUFFERED_BYTES,
    /** Longest life of a WebSocket connection or an event stream (less up to a tenth at random); 0: no limit. */
    maxLifetimeMs: e.SUBSCRIBER_MAX_LIFETIME_MS,
    webSocket: {
      // One allowlist for browsers: an origin CORS_ORIGINS admits may open WebSockets too;
      // WS_ALLOWED_ORIGINS adds origins for WebSockets only (as sent, e.g. a native shell's capacitor://localhost).
      allowedOrigins: [...new Set([...cors.origins, ...list(e.WS_ALLOWED_ORIGINS)])],
      initTimeoutMs: e.WS_INIT_TIMEOUT_MS,
      maxSubscriptionsPerConnection: e.WS_MAX_SUBSCRIPTIONS_PER_CONNECTION,
      maxMessageBytes: e.WS_MAX_MESSAGE_BYTES,
      /** Interval of protocol keep-alive messages on idle connections; 0 turns them off. */
      keepAliveMs: e.WS_KEEP_ALIVE_MS,
      /** Frames (pings included) and bytes one connection may send a second on average (bursts: a second's worth). */
      maxMessagesPerSecond: e.WS_MAX_MESSAGES_PER_SECOND,
      maxReceivedBytesPerSecond: e.WS_MAX_RECEIVED_BYTES_PER_SECOND
    }
  })
})
