// The SOAP binding over HTTP, for partners: POST /v1/UserService and POST /v2/UserService (one path per
// service version), GET <path>?wsdl for each version's contract.
// This plugin is deliberately NOT wrapped with fastify-plugin: its content-type parsers (only the two
// SOAP media types, read as strings under Fastify's bodyLimit) and its error handler (every error,
// Fastify's own included — 413, 415, rate limiting — answers as a SOAP Fault) stay inside its scope.
// Its routes are ordinary routes, so application-wide hooks (rate limit, metrics, load shedding)
// registered before it apply to them as well.
import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import { AppError, type ErrorCode } from '../../app/errors.ts'
import type { SoapVersion } from './envelope.ts'
import { SoapFault, faultResponse, type SoapResponse } from './faults.ts'
import { SERVICE_VERSIONS } from './operations.ts'
import { createSoapService } from './service.ts'
import { createWsSecurity, memoryNonceCache, redisNonceCache } from './ws-security.ts'
import { buildWsdl } from './wsdl.ts'

export interface SoapRoutesOptions {
  /** Epoch milliseconds; WS-Security freshness and nonce lifetimes are judged against it (tests inject one). */
  clock?: () => number
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

/** Errors raised by Fastify before our handler runs, as catalogue errors. */
function fastifyErrorAsAppError (error: FastifyError): unknown {
  if (error instanceof AppError || error instanceof SoapFault) return error
  const byStatus: Record<number, [ErrorCode, string]> = {
    400: ['BAD_REQUEST', 'Malformed request'],
    413: ['PAYLOAD_TOO_LARGE', 'Request body too large'],
    415: ['UNSUPPORTED_MEDIA_TYPE', 'Content-Type must be text/xml (SOAP 1.1) or application/soap+xml (SOAP 1.2)'],
    429: ['RATE_LIMITED', error.message],
    503: ['SERVICE_UNAVAILABLE', 'Service unavailable; retry later']
  }
  const known = error.statusCode !== undefined ? byStatus[error.statusCode] : undefined
  return known ? new AppError(known[0], known[1]) : error
}

export default async function soapRoutes (app: FastifyInstance, options: SoapRoutesOptions) {
  const { config } = app
  const clock = options.clock ?? Date.now
  const wsSecurity = createWsSecurity({
    store: app.store,
    partnerSecretKey: config.soap.partnerSecretKey,
    maxAgeMs: config.soap.maxAgeSec * 1000,
    nonces: app.redis ? redisNonceCache(app.redis, app.redisKey) : memoryNonceCache(),
    clock
  })
  const service = createSoapService({
    publicUrl: config.soap.publicUrl,
    store: app.store,
    events: app.events,
    caps: config.limits,
    timeoutMs: config.limits.timeoutMs,
    wsSecurity
  })

  app.removeAllContentTypeParsers()
  app.addContentTypeParser(['text/xml', 'application/soap+xml'], { parseAs: 'string', bodyLimit: config.bodyLimitBytes }, (_request, body, done) => done(null, body))

  const versionByPath = new Map(SERVICE_VERSIONS.map((v) => [v.path, v]))
  const send = (reply: FastifyReply, response: SoapResponse) => reply.code(response.status).type(response.contentType).send(response.body)

  app.setErrorHandler(async (error: FastifyError, request, reply) => {
    const version = versionByPath.get(request.routeOptions.url ?? '') ?? SERVICE_VERSIONS[0]!
    const fault = SoapFault.from(fastifyErrorAsAppError(error))
    if (fault.code === 'INTERNAL_SERVER_ERROR') request.log.error({ err: error }, 'SOAP request failed')
    return send(reply, faultResponse(fault, soapVersionOf(request), service.namespaceOf(version)))
  })

  for (const version of SERVICE_VERSIONS) {
    const wsdl = buildWsdl(version, config.soap.publicUrl)

    app.post(version.path, async (request, reply) => {
      const soapVersion = soapVersionOf(request)
      const contentType = request.headers['content-type'] ?? ''
      // The body was decoded as UTF-8 (the encoding every SOAP toolkit sends); another charset would be misread.
      const charset = /;\s*charset\s*=\s*"?([^";\s]+)/i.exec(contentType)?.[1]?.toLowerCase()
      if (charset !== undefined && charset !== 'utf-8' && charset !== 'utf8' && charset !== 'us-ascii') {
        throw new AppError('UNSUPPORTED_MEDIA_TYPE', `Unsupported charset ${charset}: send UTF-8`)
      }
      const soapAction = request.headers.soapaction
      const response = await service.handle(version, {
        soapVersion,
        envelope: request.body as string,
        actions: [typeof soapAction === 'string' ? soapAction : undefined, soapVersion === '1.2' ? actionParameter(contentType) : undefined]
      }, (err) => request.log.error({ err }, 'SOAP operation failed'))
      return send(reply, response)
    })

    app.get(version.path, async (request, reply) => {
      const query = request.query as Record<string, unknown>
      if (!('wsdl' in query) && !('WSDL' in query)) {
        throw new AppError('METHOD_NOT_ALLOWED', `POST a SOAP envelope to ${version.path}, or GET ${version.path}?wsdl for the contract`)
      }
      return reply.type('text/xml; charset=utf-8').send(wsdl)
    })
  }
}

