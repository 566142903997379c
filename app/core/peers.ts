// The direct peer of a connection (the socket's address, never a header) and what it is trusted with.
// TRUST_PROXY lists the load balancers, as Fastify's trustProxy takes them: addresses, CIDRs, or the
// names loopback, linklocal and uniquelocal. Only they may set X-Forwarded-For (Fastify) and
// X-Request-Id (here), and they are exempt from the per-address connection cap: behind a load
// balancer, every client's connection arrives from its address (cap clients there, e.g. nginx's limit_conn).
import { randomUUID } from 'node:crypto'
import type { IncomingHttpHeaders, IncomingMessage } from 'node:http'
import { BlockList, isIP, type Server, type Socket } from 'node:net'

type Range = [address: string, prefix: number]

const NAMED_RANGES: Record<string, Range[]> = {
  loopback: [['127.0.0.0', 8], ['::1', 128]],
  linklocal: [['169.254.0.0', 16], ['fe80::', 10]],
  uniquelocal: [['10.0.0.0', 8], ['172.16.0.0', 12], ['192.168.0.0', 16], ['fc00::', 7]]
}

/** The address ranges of one TRUST_PROXY entry, or null when it is none of the accepted forms. */
export function trustProxyRanges (entry: string): Range[] | null {
  const named = NAMED_RANGES[entry]
  if (named) return named
  const [address = '', prefixText, extra] = entry.split('/')
  const family = isIP(address)
  const bits = family === 6 ? 128 : 32
  const prefix = prefixText === undefined ? bits : /^\d{1,3}$/.test(prefixText) ? Number(prefixText) : NaN
  return family === 0 || extra !== undefined || !(prefix >= 0 && prefix <= bits) ? null : [[address, prefix]]
}

/** Whether an address (IPv4, IPv6 or IPv4-mapped IPv6) is one of the trusted proxies. */
export function trustedPeers (entries: string[]): (address: string | undefined) => boolean {
  if (entries.length === 0) return () => false
  const list = new BlockList()
  for (const entry of entries) {
    for (const [address, prefix] of trustProxyRanges(entry) ?? []) {
      list.addSubnet(address, prefix, isIP(address) === 6 ? 'ipv6' : 'ipv4')
    }
  }
  return (address) => {
    const family = address === undefined ? 0 : isIP(address)
    return family !== 0 && list.check(address!, family === 6 ? 'ipv6' : 'ipv4')
  }
}

/** What a request id may look like when a proxy supplies it: it ends up in logs and response headers. */
const REQUEST_ID = /^[A-Za-z0-9._:-]{1,128}$/

/** Fastify's genReqId: a trusted proxy's X-Request-Id when it has the safe form, a new UUID otherwise. */
export function requestIdFrom (
  trusted: (address: string | undefined) => boolean
): (request: IncomingMessage) => string {
  return (request) => {
    const supplied = request.headers['x-request-id']
    return typeof supplied === 'string' && REQUEST_ID.test(supplied) && trusted(request.socket.remoteAddress)
      ? supplied
      : randomUUID()
  }
}

/**
 * Caps the open connections of each direct peer address at `max` (0: no cap), counted on the raw
 * sockets before any byte is read; a connection over the cap is closed at once, unanswered. Trusted
 * proxies are not capped (their connections carry many clients).
 */
export function limitConnectionsPerPeer (
  server: Server,
  max: number,
  trusted: (address: string | undefined) => boolean
): void {
  if (max <= 0) return
  const open = new Map<string, number>()
  server.on('connection', (socket: Socket) => {
    const address = socket.remoteAddress
    if (address === undefined || trusted(address)) return
    const count = (open.get(address) ?? 0) + 1
    if (count > max) {
      socket.destroy()
      return
    }
    open.set(address, count)
    socket.once('close', () => {
      const left = open.get(address)! - 1
      if (left === 0) open.delete(address)
      else open.set(address, left)
    })
  })
}

/** Fastify's request as clientAddress reads it. */
interface AddressedRequest {
  ip: string
  headers: IncomingHttpHeaders
}

const addresses = new WeakMap<AddressedRequest, string>()

/**
 * The client's address as trusted: Fastify's `request.ip` (the socket's peer, or with TRUST_PROXY the
 * last address in X-Forwarded-For not from a trusted proxy), worked out once per request. Behind a
 * load balancer Fastify parses the header again on every read of `request.ip` (4.5 µs a read, measured),
 * and a request's budget, GraphQL routes and access line each read it.
 */
export function clientAddress (request: AddressedRequest): string {
  // Without the header it is the socket's own address: nothing to parse, nothing to keep.
  if (request.headers['x-forwarded-for'] === undefined) return request.ip
  let address = addresses.get(request)
  if (address === undefined) addresses.set(request, (address = request.ip))
  return address
}
