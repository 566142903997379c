// The budgets' counters as plain objects: in-process windows, and the counters instances share through
// Redis (leases, or a round trip per request) over the lease script's rules played by a plain function
// (test/limits/lease-script.test.ts runs the script itself on Redis).
import { test } from 'tap'
import fc from 'fast-check'
import { SharedCounters, localCounters, shareSize, type LeaseScript } from '../../app/core/limits/window-counters.ts'

/** The lease script's rules on one in-memory "Redis", with its own clock and a count of the calls. */
function fakeRedis (clock: { now: number }) {
  const keys = new Map<string, { used: number; endsAt: number }>()
  const calls: Array<{ key: string; want: number }> = []
  let failing = false
  /** Each script run, with the keys it asked for. */
  const runs: string[][] = []
  const lease: LeaseScript = async (asks, windowMs) => {
    runs.push(asks.map((a) => a.key))
    for (const { key, want } of asks) calls.push({ key, want })
    if (failing) throw new Error('Connection is closed.')
    return asks.map(({ key, want, limit }) => {
      let window = keys.get(key)
      if (!window || window.endsAt <= clock.now) keys.set(key, window = { used: 0, endsAt: clock.now + windowMs })
      const grant = Math.max(0, Math.min(want, limit - window.used))
      window.used += grant
      return [grant, window.used, window.endsAt - clock.now]
    })
  }
  return { lease, calls, runs, keys, fail (on: boolean) { failing = on } }
}

const WINDOW = 60_000

test('local counters: all or nothing, a refusal spends nothing, the window resets', async (t) => {
  const clock = { now: 1000 }
  const counters = localCounters(100, () => clock.now)
  t.match(counters.take('k', 40, 100, WINDOW), { admitted: true, remaining: 60, resetMs: WINDOW })
  t.match(counters.take('k', 70, 100, WINDOW), { admitted: false, remaining: 60 }, 'over what is left: refused')
  t.match(counters.take('k', 60, 100, WINDOW), { admitted: true, remaining: 0 }, 'the refusal spent nothing')
  t.match(counters.take('k', 0, 100, WINDOW), { admitted: false }, 'taking 0 asks whether one more would pass')
  t.match(counters.spend('k', 5, 100, WINDOW), { admitted: false, remaining: -5 }, 'spend: below zero by what it could not cover')
  clock.now += WINDOW
  t.match(counters.take('k', 1, 100, WINDOW), { admitted: true, remaining: 99 }, 'a new window')
})

test('leases: a caller far from the limit costs one grant per share; the share is spent in the process', async (t) => {
  const clock = { now: 0 }
  const redis = fakeRedis(clock)
  const counters = new SharedCounters(redis.lease, { counting: 'leases', onFallback: (err) => t.fail(String(err)), now: () => clock.now })
  const first = await counters.take('req:user:1', 1, 1600, WINDOW)
  t.match(first, { admitted: true, remaining: 1599 })
  t.same(redis.calls, [{ key: 'req:user:1', want: 100 }], 'a sixteenth of the limit asked for')
  for (let i = 0; i < 99; i++) {
    const taken = counters.take('req:user:1', 1, 1600, WINDOW)
    t.notOk(taken instanceof Promise, 'answered at once from the share')
    if (taken instanceof Promise || !taken.admitted) break
  }
  t.equal(redis.calls.length, 1, '100 requests, one grant')
  const next = counters.take('req:user:1', 1, 1600, WINDOW)
  t.ok(next instanceof Promise, 'the share spent: the next take waits for a grant')
  t.match(await next, { admitted: true, remaining: 1499 })
  t.equal(redis.calls.length, 2)
})

test('leases: a request budget leased with the cost budget alongside when neither is held: one script for both', async (t) => {
  const clock = { now: 0 }
  const redis = fakeRedis(clock)
  const counters = new SharedCounters(redis.lease, { counting: 'leases', onFallback: (err) => t.fail(String(err)), now: () => clock.now })
  const cost = { key: '{user:1}:cost', limit: 16000 }
  t.match(await counters.take('{user:1}:req', 1, 1600, WINDOW, cost), { admitted: true })
  t.same(redis.runs, [['{user:1}:req', '{user:1}:cost']], 'one script asked for both')
  t.same(redis.calls[1], { key: '{user:1}:cost', want: 1000 }, 'a sixteenth of the cost limit')
  const charged = counters.take('{user:1}:cost', 30, 16000, WINDOW)
  t.notOk(charged instanceof Promise, 'the cost charge answered from the share leased alongside')
  t.match(charged, { admitted: true, remaining: 15970 })
  // The request share spent, the cost share still held: only the request budget is asked for.
  for (let i = 0; i < 99; i++) counters.take('{user:1}:req', 1, 1600, WINDOW, cost)
  await counters.take('{user:1}:req', 1, 1600, WINDOW, cost)
  t.same(redis.runs[1], ['{user:1}:req'], 'nothing asked for a budget already held')
  // The next window: both again, in one script.
  clock.now += WINDOW
  await counters.take('{user:1}:req', 1, 1600, WINDOW, cost)
  t.same(redis.runs[2], ['{user:1}:req', '{user:1}:cost'])
  t.equal(redis.runs.length, 3)
  // Per request: nothing leased ahead, so nothing alongside.
  const exact = new SharedCounters(redis.lease, { counting: 'per-request', onFallback: (err) => t.fail(String(err)), now: () => clock.now })
  await exact.take('{user:2}:req', 1, 1600, WINDOW, { key: '{user:2}:cost', limit: 16000 })
  t.same(redis.runs[3], ['{user:2}:req'])
})

test('leases: shares shrink near the limit; past it a refusal costs no round trip until the window ends', async (t) => {
  const clock = { now: 0 }
  const redis = fakeRedis(clock)
  const counters = new SharedCounters(redis.lease, { counting: 'leases', onFallback: (err) => t.fail(String(err)), now: () => clock.now })
  let admitted = 0
  for (let i = 0; i < 150; i++) if ((await counters.take('k', 1, 100, WINDOW)).admitted) admitted++
  t.equal(admitted, 100, 'exactly the limit admitted')
  const wants = redis.calls.map((c) => c.want)
  t.ok(wants.slice(-3).every((w) => w === 1), `the last shares are single units (${wants.join(' ')})`)
  const asked = redis.calls.length
  const refused = counters.take('k', 1, 100, WINDOW)
  t.notOk(refused instanceof Promise, 'a spent window refuses at once')
  t.match(refused, { admitted: false, remaining: 0 })
  t.equal(redis.calls.length, asked, 'without asking Redis')
  clock.now += WINDOW
  t.match(await counters.take('k', 1, 100, WINDOW), { admitted: true }, 'the next window admits again')
})

test('shareSize: a sixteenth of the limit, an eighth of what is left, never less than the need', async (t) => {
  t.equal(shareSize(1600, 0, 1), 100)
  t.equal(shareSize(1600, 1200, 1), 50)
  t.equal(shareSize(1600, 1599, 1), 1)
  t.equal(shareSize(100, 0, 30), 30, 'an operation dearer than a share asks for its cost')
  t.equal(shareSize(100, 150, 1), 1, 'a limit lowered under what was granted')
})

test('per-request counting asks Redis for exactly what each take needs', async (t) => {
  const clock = { now: 0 }
  const redis = fakeRedis(clock)
  const counters = new SharedCounters(redis.lease, { counting: 'per-request', onFallback: (err) => t.fail(String(err)), now: () => clock.now })
  t.match(await counters.take('k', 30, 100, WINDOW), { admitted: true, remaining: 70 })
  t.match(await counters.take('k', 30, 100, WINDOW), { admitted: true, remaining: 40 })
  t.same(redis.calls.map((c) => c.want), [30, 30])
  t.match(await counters.take('k', 50, 100, WINDOW), { admitted: false, remaining: 40 })
  t.match(await counters.take('k', 0, 100, WINDOW), { admitted: true }, 'the 40 granted for the refused take stay usable here')
  t.match(counters.take('k', 40, 100, WINDOW), { admitted: true, remaining: 0 })
})

test('concurrent takes a share cannot cover wait for one grant', async (t) => {
  const clock = { now: 0 }
  const redis = fakeRedis(clock)
  const counters = new SharedCounters(redis.lease, { counting: 'leases', onFallback: (err) => t.fail(String(err)), now: () => clock.now })
  const all = await Promise.all(Array.from({ length: 50 }, () => counters.take('k', 1, 1600, WINDOW)))
  t.ok(all.every((taken) => taken.admitted))
  t.equal(redis.calls.length, 1, '50 takes at once, one grant of 100')
})

test('spend covers what it can (a subscription event\'s payers), below zero by the rest', async (t) => {
  const clock = { now: 0 }
  const redis = fakeRedis(clock)
  const counters = new SharedCounters(redis.lease, { counting: 'leases', onFallback: (err) => t.fail(String(err)), now: () => clock.now })
  t.match(await counters.take('cost', 90, 100, WINDOW), { admitted: true })
  t.match(await counters.spend('cost', 25, 100, WINDOW), { admitted: false, remaining: -15 })
  t.match(await counters.take('cost', 1, 100, WINDOW), { admitted: false, remaining: 0 }, 'the 10 left were spent')
})

test('while Redis fails, each instance counts alone (and is told each time); leases it holds stay good', async (t) => {
  const clock = { now: 0 }
  const redis = fakeRedis(clock)
  const failures: unknown[] = []
  const counters = new SharedCounters(redis.lease, {
    counting: 'leases', onFallback: (err) => failures.push(err), now: () => clock.now, fallback: localCounters(100, () => clock.now)
  })
  t.match(await counters.take('k', 1, 32, WINDOW), { admitted: true })
  redis.fail(true)
  t.match(counters.take('k', 1, 32, WINDOW), { admitted: true }, 'the share held is spent as before')
  let admitted = 0
  for (let i = 0; i < 40; i++) if ((await counters.take('k', 1, 32, WINDOW)).admitted) admitted++
  t.equal(admitted, 32, 'the share spent, then the limit counted in this process alone')
  t.ok(failures.length > 0, 'each failure told')
})

test('property: across instances, never more admitted than the limit, whatever the interleaving', async (t) => {
  await fc.assert(fc.asyncProperty(
    fc.integer({ min: 1, max: 500 }),
    fc.array(fc.record({
      instance: fc.integer({ min: 0, max: 2 }),
      /** A take of the second key (leased alongside the first's takes when not held), not of the first. */
      second: fc.boolean(),
      amount: fc.integer({ min: 0, max: 40 }),
      advance: fc.integer({ min: 0, max: 20_000 })
    }), { maxLength: 300 }),
    fc.constantFrom('leases' as const, 'per-request' as const),
    async (limit, steps, counting) => {
      const clock = { now: 0 }
      const redis = fakeRedis(clock)
      const instances = [0, 1, 2].map(() =>
        new SharedCounters(redis.lease, { counting, onFallback: () => { throw new Error('no failure here') }, now: () => clock.now }))
      const limits: Record<string, number> = { k: limit, c: limit * 3 }
      const admittedIn = new Map<string, number>()
      // Redis's window of a key (its end names it): what a take admitted is counted in the window current then.
      const windowOf = (key: string) => `${key}@${redis.keys.get(key)?.endsAt ?? -1}`
      // Takes of one window start together (as concurrent requests would), then the clock moves on.
      let batch: Array<Promise<void>> = []
      for (const step of steps) {
        const key = step.second ? 'c' : 'k'
        const taken = step.second
          ? instances[step.instance]!.take('c', step.amount, limits.c!, WINDOW)
          : instances[step.instance]!.take('k', step.amount, limit, WINDOW, { key: 'c', limit: limits.c! })
        batch.push(Promise.resolve(taken).then((answer) => {
          const window = windowOf(key)
          if (answer.admitted) admittedIn.set(window, (admittedIn.get(window) ?? 0) + step.amount)
        }))
        if (step.advance > 15_000) {
          await Promise.all(batch)
          batch = []
          clock.now += step.advance
        }
      }
      await Promise.all(batch)
      for (const [window, admitted] of admittedIn) {
        const keyLimit = limits[window.split('@')[0]!]!
        if (admitted > keyLimit) throw new Error(`window ${window}: ${admitted} admitted over a limit of ${keyLimit}`)
      }
    }
  ), { numRuns: 300 })
  t.pass('held over 300 random runs')
})
