// withinDeadline: the deadlines of one duration share one queue and one timer; each race still settles
// as its work does, or with its timeout value once the duration has passed.
import tap, { test } from 'tap'
import { withinDeadline } from '../app/core/domain/context.ts'

// The deadlines' timers are unref'd (they never hold a process open): one that is, while these tests wait on them.
const alive = setInterval(() => {}, 1000)
tap.teardown(() => clearInterval(alive))

const TIMED_OUT = Symbol('timed out')
const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms))
const settlesAfter = <T>(ms: number, value: T) => new Promise<T>((resolve) => setTimeout(resolve, ms, value))

test('work that settles first wins; work still pending at the deadline gets the timeout value', async (t) => {
  const [fast, slow, failing] = await Promise.allSettled([
    withinDeadline(settlesAfter(5, 'done'), 60, TIMED_OUT),
    withinDeadline(settlesAfter(500, 'late'), 60, TIMED_OUT),
    withinDeadline(sleep(5).then(() => { throw new Error('boom') }), 60, TIMED_OUT)
  ])
  t.same(fast, { status: 'fulfilled', value: 'done' })
  t.same(slow, { status: 'fulfilled', value: TIMED_OUT })
  t.equal(failing.status, 'rejected')
  t.equal((failing as PromiseRejectedResult).reason.message, 'boom', 'a failure is passed on as it is')
})

test('races started one after another each get their full duration, from one shared timer', async (t) => {
  const started = performance.now()
  const never = new Promise<never>(() => {})
  const expiries: number[] = []
  const races: Promise<unknown>[] = []
  for (let i = 0; i < 5; i++) {
    races.push(withinDeadline(never, 80, TIMED_OUT).then((value) => {
      expiries.push(performance.now() - started)
      return value
    }))
    await sleep(20)
  }
  t.same(await Promise.all(races), Array(5).fill(TIMED_OUT))
  // Each expires no earlier than 80 ms after it started (the i-th started about 20·i ms in), in order.
  expiries.forEach((at, i) => t.ok(at >= 80 + 20 * i - 2, `race ${i} expired at ${at.toFixed(0)} ms, not before its deadline`))
  t.same([...expiries].sort((a, b) => a - b), expiries, 'in the order they started')
})

test('many races of one duration, most settling early: every pending one still expires, and none early', async (t) => {
  const started = performance.now()
  const never = new Promise<never>(() => {})
  const results = await Promise.all(Array.from({ length: 3000 }, (_, i) =>
    withinDeadline(i % 3 === 0 ? never : settlesAfter(i % 7, i), 250, TIMED_OUT)))
  // 250 ms against settling within 6: a CPU busy with other test files must not make an early one late.
  t.ok(performance.now() - started >= 249, 'nothing expired before the duration passed')
  t.equal(results.filter((r) => r === TIMED_OUT).length, 1000, 'exactly the pending thousand expired')
  t.ok(results.every((r, i) => i % 3 === 0 ? r === TIMED_OUT : r === i), 'the others settled with their own value')
})

test('durations are independent: a short deadline is not held back by a long one started before it', async (t) => {
  const never = new Promise<never>(() => {})
  const long = withinDeadline(never, 2000, 'long')
  const started = performance.now()
  t.equal(await withinDeadline(never, 30, 'short'), 'short')
  t.ok(performance.now() - started < 1000, 'the short deadline expired on its own timer')
  void long
})
