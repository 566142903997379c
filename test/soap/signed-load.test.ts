// A partner's sustained stream of signed messages, through a listening server, as the benchmark's
// soap-get-user-signed row sends it (bench/soap-signer.ts signs, a pool made before a round and sent
// last-signed first, as bench/transports.ts does): every message of a pool is accepted, no Created
// runs ahead of the clock. The signer used to date each message a millisecond after the last, and
// signing takes less than that: a full benchmark run's pools ended more than the 5 s of tolerated clock
// skew in the future, and the messages sent first were refused (HTTP 500, "The Timestamp Created is in
// the future").
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { test } from 'tap'
import { createRequestSigner } from '../../bench/soap-signer.ts'
import { createPartnerAccount } from '../../cli/create-partner.ts'
import type { TestLike } from '../helpers/app.ts'
import { listenSoapApp, post, readFault } from './helpers.ts'
import { makeCertificate } from './x509.ts'

const NS = 'urn:graphql-query-service:soap/v1/UserService'
const XML = { 'content-type': 'text/xml; charset=utf-8' }
const MAX_AGE_SEC = 300
const getUser = (id: string) => `<GetUser xmlns="${NS}"><id>${id}</id></GetUser>`

/** A listening service with a partner ("bench", user 1) holding a certificate, its messages' signer, one clock. */
async function setup (t: TestLike) {
  const dir = mkdtempSync(join(tmpdir(), 'signed-load-'))
  t.teardown(() => rmSync(dir, { recursive: true, force: true }))
  const partner = makeCertificate(dir, 'bench')
  // The service's and the signer's clock: the real one, moved on by `advance`.
  let offset = 0
  const clock = () => Date.now() + offset
  // Budgets out of reach, as the benchmark sets them.
  const env = { WSSE_MAX_AGE_SEC: String(MAX_AGE_SEC), RATE_LIMIT_REQUESTS: '1000000000', RATE_LIMIT_COST: '1000000000000' }
  const app = await listenSoapApp(t, env, { clock })
  await createPartnerAccount(app.store, app.partnerSecretKey, { login: 'bench', certificate: partner.cert, userId: '1' })
  const sign = createRequestSigner(partner.key, partner.cert, clock)
  const send = (xml: string) => post(`${app.url}/v1/UserService`, xml, XML)
  return { ...app, sign, send, clock, advance: (ms: number) => { offset += ms } }
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
