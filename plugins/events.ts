// Pub/sub for domain events (and GraphQL subscriptions): an in-process mqemitter by default, Redis
// (mqemitter-redis) when REDIS_URL is set, so a message posted on one instance reaches subscribers on all.
import { once } from 'node:events'
import fp from 'fastify-plugin'
import mqemitter, { type MQEmitter } from 'mqemitter'
import mqemitterRedis from 'mqemitter-redis'
import { Gauge } from 'prom-client'
import type { FastifyInstance } from 'fastify'
import type { DomainEvent, Events } from '../app/core/domain/context.ts'
import type { RedisAddress } from '../app/core/redis-address.ts'
import { CLOSE_WAIT_MS, COMMAND_TIMEOUT_MS, redisConnection } from './redis.ts'

/** The domain's events port (publish), and what subscribers need to listen to those events. */
export interface EventBus extends Events {
  /** The pub/sub emitter events are published on and subscribers listen to. */
  emitter: MQEmitter
  /** The topic messages of a room are published on (Redis channels carry the deployment's prefix). */
  roomTopic (roomId: string): string
  /** The topic of `userChanged` events (a user's role written, or the user deleted), on every instance. */
  userChangesTopic: string
}

declare module 'fastify' {
  interface FastifyInstance {
    events: EventBus
  }
}

interface Connection extends NodeJS.EventEmitter { status: string; disconnect (): void; quit (): Promise<unknown> }
/**
 * What mqemitter-redis sets on its emitter besides what its typings declare (mqemitter-redis.d.ts leaves
 * out the connections it opens and the `state` emitter it reports their errors on).
 */
type RedisEmitter = ReturnType<typeof mqemitterRedis> & {
  pubConn: Connection
  subConn: Connection
  state: NodeJS.EventEmitter
}

/** A connection as mqemitter-redis's options type it. */
type EmitterConnection = NonNullable<NonNullable<Parameters<typeof mqemitterRedis>[0]>['subConn']>

/** How long startup waits for the Redis pub/sub connections. */
const PUBSUB_READY_TIMEOUT_MS = 10_000

/**
 * With Redis, waits until mqemitter-redis's two connections are ready. A SUBSCRIBE sent while the
 * subscriber connection is still in its handshake makes ioredis's ready check fail (the connection is
 * then in subscriber mode) and reconnect, and `publish` below drops events while the publisher is not ready.
 */
async function pubSubReady (connections: Connection[], timeoutMs: number): Promise<void> {
  await Promise.all(connections.map(async (connection) => {
    if (connection.status === 'ready') return
    try {
      await once(connection, 'ready', { signal: AbortSignal.timeout(timeoutMs) })
    } catch (err) {
      throw new Error(`Redis pub/sub is not reachable: ${(err as Error).message}`)
    }
  }))
}

export default fp(async function events (app: FastifyInstance) {
  const { prefix: redisPrefix } = app.config.redis
  // Its two connections are ours: one server, or a Redis Cluster (its pub/sub reaches every node). Both
  // answer the calls mqemitter-redis makes (subscribe, publish, their message events, quit), though its
  // typings name its own copy of ioredis's Redis class.
  const pubSubConnection = (address: RedisAddress) => {
    const connection = redisConnection(address, 'pub/sub')
    connection.connect().catch(() => {}) // pubSubReady below waits for it, and says why it failed
    return connection as unknown as EmitterConnection
  }
  const redisEmitter = app.redis.shared<RedisEmitter | null>('events', ({ address }) =>
    mqemitterRedis({ subConn: pubSubConnection(address), pubConn: pubSubConnection(address) }) as RedisEmitter,
  () => null)
  const emitter: MQEmitter = redisEmitter ?? mqemitter()
  // One warning per 10 s at most: an outage must not flood the logs.
  let lastWarning = 0
  const warn = (err: unknown, msg: string) => {
    if (Date.now() - lastWarning < 10_000) return
    lastWarning = Date.now()
    app.log.warn({ err: (err as Error)?.message ?? String(err) }, msg)
  }
  // mqemitter-redis's own ioredis connections: events are published on the first.
  const connections = redisEmitter ? [redisEmitter.pubConn, redisEmitter.subConn] : []
  const publisher = connections[0] ?? null
  // For the alert on a lost event bus (deploy/prometheus/alerts.yml): while it is 0, events published on
  // this instance reach no other instance's subscribers, and theirs none of this instance's.
  // eslint-disable-next-line no-new -- a prom-client metric registers itself in `registers` when constructed
  new Gauge({
    name: 'event_bus_connected',
    help: '1 while the event bus carries events between instances (both Redis pub/sub connections ready; always 1 in process), else 0',
    registers: [app.metricsRegistry],
    collect () { this.set(connections.every((c) => c.status === 'ready') ? 1 : 0) }
  })
  // mqemitter-redis re-emits its connections' errors on `state`; unheard, one Redis outage would crash
  // the process. The connections reconnect (and re-subscribe) by themselves; readiness reports the outage.
  redisEmitter?.state.on('error', (err: Error) => warn(err, 'redis pub/sub connection error'))
  const roomTopic = (roomId: string) => `${redisPrefix}room/${roomId}`
  // Not under room/: no room id can name it.
  const userChangesTopic = `${redisPrefix}user-changes`
  const topicOf = (event: DomainEvent) =>
    event.type === 'messageAdded' ? roomTopic(event.message.roomId) : userChangesTopic
  // Delivery to live subscribers is best-effort: the write it announces is already stored, so a Redis
  // outage must neither fail nor stall it (ioredis would queue the publish until Redis returns). While
  // Redis is down, subscribers miss those events; `messages(roomId)` has them.
  app.decorate('events', {
    emitter,
    roomTopic,
    userChangesTopic,
    publish (event: DomainEvent) {
      if (publisher && publisher.status !== 'ready') {
        warn(new Error(`Redis connection ${publisher.status}`), 'event not published: Redis pub/sub unavailable')
        return Promise.resolve()
      }
      return new Promise<void>((resolve) => {
        // Bounded as well: Redis may stop answering after the check above (ioredis then holds the
        // publish until it reconnects), and the write must not wait for that.
        const timer = publisher && setTimeout(() => {
          warn(new Error(`no answer within ${COMMAND_TIMEOUT_MS} ms`), 'event not published')
          resolve()
        }, COMMAND_TIMEOUT_MS)
        emitter.emit({ topic: topicOf(event), payload: event }, (err?: Error) => {
          if (timer) clearTimeout(timer)
          if (err) warn(err, 'event not published')
          resolve()
        })
      })
    }
  })
  app.addHook('onClose', () => new Promise<void>((resolve) => {
    if (connections.some((c) => c.status !== 'ready')) {
      // Redis is down: mqemitter-redis's quit() would wait for a reconnection, and ioredis cannot end a
      // connection between two retries, so a graceful shutdown would hang until its deadline. Stop the
      // retries instead; nothing is left to flush.
      for (const c of connections) c.disconnect()
      return resolve()
    }
    // Bounded too: Redis may vanish, or stop answering, between the check above and the end of QUIT.
    // mqemitter-redis's close() drops the promises of its QUIT commands; one still unanswered when the
    // connections are cut below would reject unhandled, so they are given a handler here.
    for (const c of connections) {
      const quit = c.quit.bind(c)
      c.quit = () => quit().catch(() => undefined)
    }
    const timer = setTimeout(() => { for (const c of connections) c.disconnect(); resolve() }, CLOSE_WAIT_MS).unref()
    emitter.close(() => { clearTimeout(timer); resolve() })
  }))
  // Last: when Redis is unreachable, start fails here, and closing the app ends the connections above.
  await pubSubReady(connections, PUBSUB_READY_TIMEOUT_MS)
}, { name: 'events', dependencies: ['config', 'metrics', 'redis'] })
