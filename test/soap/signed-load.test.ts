// A partner's sustained stream of signed messages, through a listening server, as the benchmark's
// soap-get-user-signed row sends it (bench/soap-signer.ts signs, a pool made before a round and sent
// last-signed first, as bench/transports.ts does):
// - every message of a pool is accepted: no Created runs ahead of the clock. The signer used to date
//   each message a millisecond after the last, and signing takes less than that: a full benchmark run's
//   pools ended more than the 5 s of tolerated clock skew in the future, and the messages sent first
//   were refused (HTTP 500, "The Timestamp Created is in the future");
// - the service's capacity, its in-process replay memory (REPLAY_MEMORY_ENTRIES live nonces and
//   signatures, made small here): under it every well-formed message is answered; past it a message is
//   refused with HTTP 503 and Retry-After (when the oldest entry is forgotten), counted by
//   soap_replay_memory_full_total, never a 500; once entries expire, messages are accepted again.
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { test } from 'tap'
import { createRequestSigner } from '../../bench/soap-signer.ts'
import { createPartnerAccount } from '../../cli/create-partner.ts'
import { CLOCK_SKEW_MS } from '../../app/soap/ws-security.ts'
import type { TestLike } from '../helpers/app.ts'
import { listenSoapApp, post, readFault } from './helpers.ts'
import { makeCertificate } from './x509.ts'

const NS = 'urn:graphql-query-service:soap/v1/UserService'
const XML = { 'content-type': 'text/xml; charset=utf-8' }
const MAX_AGE_SEC = 300
const getUser = (id: string) => `<GetUser xmlns="${NS}"><id>${id}</id></GetUser>`

/** A listening service with a partner ("bench", user 1) holding a certificate, its messages' signer, one clock. */
async function setup (t: TestLike, replayMemoryEntries?: number) {
  const dir = mkdtempSync(join(tmpdir(), 'signed-load-'))
  t.teardown(() => rmSync(dir, { recursive: true, force: true }))
  const partner = makeCertificate(dir, 'bench')
  // The service's and the signer's clock: the real one, moved on by `advance`.
  let offset = 0
  const clock = () => Date.now() + offset
  // Budgets out of reach, as the benchmark sets them: this is about what a partner's stream costs the replay memory.
  const env = { WSSE_MAX_AGE_SEC: String(MAX_AGE_SEC), RATE_LIMIT_REQUESTS: '1000000000', RATE_LIMIT_COST: '1000000000000' }
  const app = await listenSoapApp(t, env, { clock, replayMemoryEntries })
  await createPartnerAccount(app.store, app.partnerSecretKey, { login: 'bench', certificate: partner.cert, userId: '1' })
  const sign = createRequestSigner(partner.key, partner.cert, clock)
  const send = (xml: string) => post(`${app.url}/v1/UserService`, xml, XML)
  return { ...app, sign, send, clock, advance: (ms: number) => { offset += ms } }
}

/** The value of the one sample of `name` in a scrape of /metrics. */
async function metric (url: string, name: string): Promise<number | undefined> {
  const text = await (await fetch(`${url}/metrics`)).text()
  const line = text.split('\n').find((l) => l.startsWith(`${name} `))
  return line === undefined ? undefined : Number(line.slice(name.length + 1))
}

test('a pool of signed messages made before a round, sent last-signed first: none dated ahead of the clock, all answered', async (t) => {
  const { sign, send } = await setup(t)
  const ids = ['1', '2', '3', '4', '5']
  // As the benchmark makes a round's messages: a few seconds' worth at once (signing takes about 0.4 ms).
  const pool: string[] = []
  for (let i = 0; i < 1000; i++) pool.push(sign(getUser(ids[i % ids.length]!)))
  const signedBy = Date.now()
  const created = pool.map((xml) => /<Created>([^<]*)<\/Created>/.exec(xml)![1]!)
  t.equal(new Set(created).size, pool.length, 'each message has a Created of its own (the same Body and Created would be a replay)')
  const ahead = Math.max(...created.map((c) => Date.parse(c))) - signedBy
  t.ok(ahead <= 0, `no Created after the moment the pool was made (the latest is ${ahead} ms ahead)`)

  // Sent as the benchmark sends them, the last signed first, eight at a time: every one answered.
  const statuses = new Map<number, number>()
  const faults = new Set<string>()
  while (pool.length > 0) {
    const batch = pool.splice(-8).reverse()
    for (const response of await Promise.all(batch.map(send))) {
      statuses.set(response.status, (statuses.get(response.status) ?? 0) + 1)
      if (response.status !== 200) faults.add(readFault(response.text).reason)
    }
  }
  t.same(Object.fromEntries(statuses), { 200: 1000 }, 'all 1000 answered')
  t.same([...faults], [], 'no fault')
})

test('the replay memory\'s capacity: under it every signed message is answered; past it 503 with Retry-After, counted, never a 500', async (t) => {
  const CAPACITY = 40
  const { url, sign, send, advance } = await setup(t, CAPACITY)
  const ids = ['1', '2', '3', '4', '5']
  t.equal(await metric(url, 'soap_replay_memory_full_total'), 0, 'nothing refused yet')

  const accepted: string[] = []
  for (let i = 0; i < CAPACITY; i++) {
    const xml = sign(getUser(ids[i % ids.length]!))
    const response = await send(xml)
    t.equal(response.status, 200, `message ${i + 1} of ${CAPACITY}: answered`)
    accepted.push(xml)
  }

  // One more while every entry is live: refused as unavailable for now, with when to retry.
  const over = await send(sign(getUser('2')))
  t.equal(over.status, 503, 'past the capacity: HTTP 503, not a 500')
  const retryAfter = Number(over.headers.get('retry-after'))
  const remembered = (MAX_AGE_SEC * 1000 + CLOCK_SKEW_MS) / 1000
  t.ok(retryAfter >= 1 && retryAfter <= remembered, `Retry-After ${retryAfter} s: when the oldest entry is forgotten (within ${remembered} s)`)
  t.match(readFault(over.text), { code: 'soap:Server', errorCode: 'SERVICE_UNAVAILABLE', reason: /retry later/ })
  t.equal(await metric(url, 'soap_replay_memory_full_total'), 1, 'counted')

  // A replay is still a replay (the memory refuses what it holds before it runs out of room).
  t.match(readFault((await send(accepted[0]!)).text), { code: 'wsse:FailedAuthentication', reason: /already been received/ })

  // Later, once the oldest entries are forgotten, the stream goes on.
  advance(retryAfter * 1000)
  const later = await send(sign(getUser('3')))
  t.equal(later.status, 200, `accepted ${retryAfter} s later`)
  t.equal(await metric(url, 'soap_replay_memory_full_total'), 1, 'nothing more refused')
})
