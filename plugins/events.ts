// Pub/sub for domain events (and GraphQL subscriptions): an in-process mqemitter by default, Redis
// (mqemitter-redis) when REDIS_URL is set, so a message posted on one instance reaches subscribers on all.
import fp from 'fastify-plugin'
import mqemitter, { type MQEmitter } from 'mqemitter'
import mqemitterRedis from 'mqemitter-redis'
import type { FastifyInstance } from 'fastify'
import type { DomainEvent, Events } from '../app/domain/context.ts'

declare module 'fastify' {
  interface FastifyInstance {
    emitter: MQEmitter
    events: Events
    /** The topic messages of a room are published on (Redis channels carry the deployment's prefix). */
    roomTopic (roomId: string): string
  }
}

export default fp(async function events (app: FastifyInstance) {
  const { redisUrl, redisPrefix } = app.config
  const emitter: MQEmitter = redisUrl ? mqemitterRedis({ connectionString: redisUrl }) : mqemitter()
  const roomTopic = (roomId: string) => `${redisPrefix}room/${roomId}`
  app.decorate('emitter', emitter)
  app.decorate('roomTopic', roomTopic)
  app.decorate('events', {
    publish (event: DomainEvent) {
      return new Promise<void>((resolve, reject) => {
        emitter.emit({ topic: roomTopic(event.message.roomId), payload: event }, (err?: Error) => (err ? reject(err) : resolve()))
      })
    }
  })
  app.addHook('onClose', () => new Promise<void>((resolve) => emitter.close(() => resolve())))
}, { name: 'events', dependencies: ['config'] })
