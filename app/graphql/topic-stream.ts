// The events of one pub/sub topic as an async iterator, for a subscription's source stream. The
// emitter is the service's (mqemitter in process, mqemitter-redis across instances); its documented
// `on`/`removeListener` with completion callbacks are all this needs.
//
// The queue is bounded: a subscriber that does not read (a stalled socket) loses its oldest events
// beyond `maxQueued` rather than growing the heap; `messages(roomId)` has them all.
import type { MQEmitter, Message } from 'mqemitter'

export interface TopicStreamOptions {
  maxQueued: number
}

/**
 * Subscribes to `topic` (resolves once the emitter has registered the listener: with Redis, after
 * the SUBSCRIBE round trip) and returns the stream of its payloads. `return()` unsubscribes, also when
 * called while the subscription is still being registered.
 */
export async function topicStream<T> (emitter: MQEmitter, topic: string, { maxQueued }: TopicStreamOptions): Promise<AsyncIterableIterator<T>> {
  const queued: T[] = []
  let waiting: ((result: IteratorResult<T>) => void) | null = null
  let ended = false
  const listener = (message: Message, done: () => void) => {
    const payload = message.payload as T
    if (waiting) {
      const resolve = waiting
      waiting = null
      resolve({ done: false, value: payload })
    } else {
      queued.push(payload)
      if (queued.length > maxQueued) queued.shift()
    }
    done()
  }
  const registered = new Promise<void>((resolve) => emitter.on(topic, listener, () => resolve()))
  const end = async (): Promise<IteratorResult<T>> => {
    if (!ended) {
      ended = true
      queued.length = 0
      waiting?.({ done: true, value: undefined })
      waiting = null
      // Removing before the registration completed would leave the listener behind.
      await registered
      await new Promise<void>((resolve) => emitter.removeListener(topic, listener, () => resolve()))
    }
    return { done: true, value: undefined }
  }
  await registered
  const iterator: AsyncIterableIterator<T> = {
    next () {
      if (queued.length > 0) return Promise.resolve({ done: false, value: queued.shift()! })
      if (ended) return Promise.resolve({ done: true, value: undefined })
      return new Promise((resolve) => { waiting = resolve })
    },
    return: end,
    throw: async (err) => { await end(); throw err },
    [Symbol.asyncIterator]: () => iterator
  }
  return iterator
}
