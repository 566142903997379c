// The SOAP binding over HTTP, for partners: POST /v1/UserService and POST /v2/UserService (one path per
// service version), GET <path>?wsdl for each version's contract, GET <path>?cert for the certificate the
// service signs its replies with (when SOAP_SIGNING_KEY and SOAP_SIGNING_CERT are set).
// This plugin is deliberately NOT wrapped with fastify-plugin: its content-type parsers (only the two
// SOAP media types, read as strings under Fastify's bodyLimit) and its error handler (every error,
// Fastify's own included — 413, 415 — answers as a SOAP Fault) stay inside its scope.
// Budgets: the application-wide per-request hook is off for these routes. A POST spends its request
// budget (and cost units) on the partner it authenticates, or on the client address when it
// authenticates nobody (see Admission in service.ts); the contract (?wsdl) is served outside any budget,
// so a throttled partner's toolkit can still load it. Throttling answers 429 with Retry-After.
// Other application-wide hooks (metrics, load shedding) apply as to any route.
import { createHash } from 'node:crypto'
import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import { Counter } from 'prom-client'
import { trustedPeers } from '../../app/core/peers.ts'
import type { DomainDeps } from '../../app/core/domain/context.ts'
import { AppError, ErrorCodes } from '../../app/core/errors.ts'
import { fastifyErrorAsAppError } from '../fastify-errors.ts'
import { ifNoneMatchHits } from '../../app/core/if-none-match.ts'
import type { SoapVersion } from '../../app/soap/envelope.ts'
import { SoapFault, escapeXml, faultResponse, type SoapResponse } from '../../app/soap/faults.ts'
import { SERVICE_VERSIONS, type ServiceVersion } from '../../app/soap/operations.ts'
import { createReplySigner } from '../../app/soap/reply-signing.ts'
import { createSoapService, type Admission } from '../../app/soap/service.ts'
import { createWsSecurity, memoryNonceCache, redisNonceCache, type NonceCache } from '../../app/soap/ws-security.ts'
import { buildWsdl } from '../../app/soap/wsdl.ts'
import { clientAddress } from '../../app/core/peers.ts'

export interface SoapRoutesOptions {
  /** The domain's dependencies, built once by the composition root (app/app.ts) for every transport. */
  domain: DomainDeps
  /** Epoch milliseconds; WS-Security freshness and nonce lifetimes are judged against it (tests inject one). */
  clock?: () => number
  /** Entries of the in-process replay memory (REPLAY_MEMORY_ENTRIES unless a test makes it small). */
  replayMemoryEntries?: number
}

const SOAP12_TYPE = /^\s*application\/soap\+xml\s*(;|$)/i

function soapVersionOf (request: FastifyRequest): SoapVersion {
  return SOAP12_TYPE.test(request.headers['content-type'] ?? '') ? '1.2' : '1.1'
}

/** The `action` parameter of a SOAP 1.2 Content-Type (optional). */
function actionParameter (contentType: string): string | undefined {
  const match = /;\s*action\s*=\s*("[^"]*"|[^;\s]*)/i.exec(contentType)
  return match?.[1]
}

/** The SOAP binding's words for Fastify's own refusals (fastifyErrorAsAppError words the rest). */
const FASTIFY_ERROR_WORDS = {
  400: 'Malformed request',
  415: 'Content-Type must be text/xml (SOAP 1.1) or application/soap+xml (SOAP 1.2)'
}

// Where the WSDL's endpoint address goes: built once per version, the address filled in per request.
const ADDRESS_SLOT = 'urn:endpoint-address-slot'
// A forwarded host (X-Forwarded-Host, from a trusted proxy) we are willing to write into the contract.
const HOST = /^(?:[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*|\[[0-9A-Fa-f:.]+\])(?::\d{1,5})?$/
// The contract changes only with a deployment: caches keep it an hour and revalidate it by its ETag.
const WSDL_CACHE_CONTROL = 'public, max-age=3600'

/** The address and port a connection came to (never a header), as a URL authority. */
function listeningAuthority (request: FastifyRequest): string {
  const address = (request.socket.localAddress ?? '127.0.0.1').replace(/^::ffff:(?=\d+\.)/, '')
  return `${address.includes(':') ? `[${address}]` : address}:${request.socket.localPort}`
}

export default async function soapRoutes (app: FastifyInstance, options: SoapRoutesOptions) {
  const { config } = app
  const clock = options.clock ?? Date.now
  // Nonces and signatures already received: in Redis across instances, else in this process (bounded).
  const nonces: NonceCache & { readonly refusedFull?: number } = app.redis.shared('WS-Security nonces',
    (redis) => redisNonceCache(redis.client, redis.key),
    () => memoryNonceCache(options.replayMemoryEntries))
  // For the operator: messages refused (503) because that memory was full; 0 with Redis (Redis bounds itself).
  // eslint-disable-next-line no-new -- a prom-client metric registers itself in `registers` when constructed
  new Counter({
    name: 'soap_replay_memory_full_total',
    help: 'SOAP messages refused with HTTP 503 because the in-process WS-Security replay memory was full of live nonces and signatures',
    registers: [app.metricsRegistry],
    collect () { this.reset(); this.inc(nonces.refusedFull ?? 0) }
  })
  const wsSecurity = createWsSecurity({
    store: options.domain.store,
    partnerSecretKey: config.soap.partnerSecretKey,
    maxAgeMs: config.soap.maxAgeSec * 1000,
    nonces,
    clock,
    allowSha1: config.soap.allowSha1
  })
  const { signing } = config.soap
  if (!signing) app.log.info('SOAP replies are unsigned: set SOAP_SIGNING_KEY and SOAP_SIGNING_CERT to sign replies to signed requests')
  const service = createSoapService({
    namespaceBase: config.soap.namespaceBase,
    ...options.domain,
    mutationCost: config.budgets.mutationCost,
    xmlLimits: { maxElements: config.soap.maxElements, maxAttributes: config.soap.maxAttributes },
    timeoutMs: config.execution.timeoutMs,
    wsSecurity,
    replySigner: signing ? createReplySigner({ ...signing, clock }) : undefined
  })

  app.removeAllContentTypeParsers()
  app.addContentTypeParser(
    ['text/xml', 'application/soap+xml'],
    { parseAs: 'string', bodyLimit: config.server.bodyLimitBytes },
    (_request, body, done) => done(null, body)
  )

  // With tracing on, each POST runs under a SOAP operation span (app/core/tracing.ts); off, the service's own handle.
  const { tracing } = app
  const handle: typeof service.handle = tracing
    ? (version, soapRequest, admission, onInternalError) => tracing.soapOperation(`${version.id}.${version.serviceName}`,
        (describe) => service.handle(version, soapRequest, { ...admission, describe }, onInternalError))
    : service.handle

  const versionByPath = new Map(SERVICE_VERSIONS.map((v) => [v.path, v]))
  const send = (reply: FastifyReply, response: SoapResponse) => {
    if (response.retryAfter !== undefined) reply.header('retry-after', response.retryAfter)
    return reply.code(response.status).type(response.contentType).send(response.body)
  }

  app.setErrorHandler(async (error: FastifyError, request, reply) => {
    const version = versionByPath.get(request.routeOptions.url ?? '') ?? SERVICE_VERSIONS[0]!
    const fault = SoapFault.from(
      error instanceof SoapFault ? error : fastifyErrorAsAppError(error, FASTIFY_ERROR_WORDS)
    )
    if (fault.code === 'INTERNAL_SERVER_ERROR') request.log.error({ err: error }, 'SOAP request failed')
    // Refused before the handler (media type, body size): it authenticated nobody, so it counts on the address.
    if (request.method === 'POST') await admissionOf(request).spendOnAddress()
    const response = faultResponse(fault, soapVersionOf(request), service.namespaceOf(version))
    // A GET is no SOAP exchange: its status is the error's own (405, 404, 400), never a SOAP 500.
    return send(reply, request.method === 'GET' ? { ...response, status: ErrorCodes[fault.code].status } : response)
  })

  /** The budgets of one POST, bound to its client address: every SOAP spend goes through it. */
  function admissionOf (request: FastifyRequest): Admission {
    return {
      checkAddress: () => app.budgets.checkRequestBudget(null, clientAddress(request)),
      spendOnAddress: () => app.budgets.spendRequest(null, clientAddress(request)).catch(() => {}),
      spendRequest: (caller) => app.budgets.spendRequest(caller, clientAddress(request)),
      spendCost: async (caller, cost) => { await app.budgets.chargeCost(caller, clientAddress(request), cost) }
    }
  }

  const trusted = trustedPeers(config.server.trustProxy)
  /**
   * The endpoint address of `version` for a request: SOAP_PUBLIC_URL; else, behind a trusted proxy
   * (TRUST_PROXY), the host it forwards; else the address the connection came to. Never the Host
   * header of a direct client: anyone could have the contract point partners at their own server
   * (and a cache keep that copy).
   */
  function addressOf (version: ServiceVersion, request: FastifyRequest): string {
    if (config.soap.publicUrl) return config.soap.publicUrl + version.path
    if (trusted(request.socket.remoteAddress) && request.headers['x-forwarded-host'] !== undefined) {
      if (!HOST.test(request.host)) {
        throw new AppError(
          'BAD_REQUEST',
          'The forwarded host is not a host name; set SOAP_PUBLIC_URL to publish the WSDL'
        )
      }
      return `${request.protocol}://${request.host}${version.path}`
    }
    return `${request.protocol}://${listeningAuthority(request)}${version.path}`
  }

  /** Sends the contract with an ETag (304 when the client's copy is current) and a cache lifetime. */
  function sendContract (request: FastifyRequest, reply: FastifyReply, wsdl: string) {
    const etag = `"${createHash('sha256').update(wsdl).digest('base64url').slice(0, 27)}"`
    reply.header('etag', etag).header('cache-control', WSDL_CACHE_CONTROL)
    // The address may follow the forwarded host: a shared cache must key on it.
    if (config.soap.publicUrl === null && config.server.trustProxy.length > 0) {
      reply.header('vary', 'X-Forwarded-Host, X-Forwarded-Proto')
    }
    if (ifNoneMatchHits(request.headers['if-none-match'], etag)) return reply.code(304).send()
    return reply.type('text/xml; charset=utf-8').send(wsdl)
  }

  for (const version of SERVICE_VERSIONS) {
    const template = buildWsdl(version, config.soap.namespaceBase, ADDRESS_SLOT, signing !== null)
      .split(`location="${ADDRESS_SLOT}"`)

    app.post(version.path, { config: { rateLimit: false } }, async (request, reply) => {
      const soapVersion = soapVersionOf(request)
      const contentType = request.headers['content-type'] ?? ''
      // The body was decoded as UTF-8 (the encoding every SOAP toolkit sends); another charset would be misread.
      const charset = /;\s*charset\s*=\s*"?([^";\s]+)/i.exec(contentType)?.[1]?.toLowerCase()
      if (charset !== undefined && charset !== 'utf-8' && charset !== 'utf8' && charset !== 'us-ascii') {
        throw new AppError('UNSUPPORTED_MEDIA_TYPE', `Unsupported charset ${charset}: send UTF-8`)
      }
      const soapAction = request.headers.soapaction
      const response = await handle(version, {
        soapVersion,
        envelope: request.body as string,
        actions: [typeof soapAction === 'string' ? soapAction : undefined, soapVersion === '1.2' ? actionParameter(contentType) : undefined]
      }, admissionOf(request), (err) => request.log.error({ err }, 'SOAP operation failed'))
      return send(reply, response)
    })

    app.get(version.path, { config: { rateLimit: false } }, async (request, reply) => {
      const query = request.query as Record<string, unknown>
      if ('wsdl' in query || 'WSDL' in query) {
        return sendContract(request, reply, template.join(`location="${escapeXml(addressOf(version, request))}"`))
      }
      if ('cert' in query) {
        if (!signing) throw new AppError('NOT_FOUND', 'Replies are not signed here: there is no service certificate')
        return reply.header('cache-control', WSDL_CACHE_CONTROL).type('application/x-pem-file').send(signing.certificatePem)
      }
      if (Object.keys(query).some((k) => /^(xsd|singlewsdl)$/i.test(k))) {
        throw new AppError('NOT_FOUND', `The contract is one document with its schema inline: GET ${version.path}?wsdl`)
      }
      reply.header('allow', 'POST')
      throw new AppError(
        'METHOD_NOT_ALLOWED',
        `POST a SOAP envelope to ${version.path}, or GET ${version.path}?wsdl for the contract` +
          (signing ? ` and ${version.path}?cert for the certificate replies are signed with` : '')
      )
    })
  }
}
