// The SOAP XML reader's cost, beside two other parsers, on the benchmark's WS-Security GetUser envelope:
//   npx node bench/xml-parse.ts [--iterations N]
// app/soap/xml.ts (one pass: well-formedness, namespaces, tree); saxes (conformant, namespace-aware,
// the reference of test/soap/xml-differential.test.ts), building the same tree; fast-xml-parser's
// validator + parser (namespaces not resolved). Prints microseconds per parse after a warm-up; the
// figures depend on the machine, so nothing here is asserted (the tests check behaviour only).
import { createHash, randomBytes } from 'node:crypto'
import { parseArgs } from 'node:util'
import { SaxesParser } from 'saxes'
import { XMLParser, XMLValidator } from 'fast-xml-parser'
import { parseXml } from '../app/soap/xml.ts'

const { values } = parseArgs({ options: { iterations: { type: 'string', default: '30000' } } })
const iterations = Number(values.iterations)

const WSSE = 'http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-wssecurity-secext-1.0.xsd'
const WSU = 'http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-wssecurity-utility-1.0.xsd'
const PROFILE = 'http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-username-token-profile-1.0'

function digestEnvelope (): string {
  const nonce = randomBytes(16)
  const created = new Date().toISOString()
  const digest = createHash('sha1').update(nonce).update(created).update('pw').digest('base64')
  return '<?xml version="1.0" encoding="utf-8"?><s:Envelope xmlns:s="http://schemas.xmlsoap.org/soap/envelope/"><s:Header>' +
    `<wsse:Security xmlns:wsse="${WSSE}" xmlns:wsu="${WSU}"><wsse:UsernameToken><wsse:Username>p</wsse:Username>` +
    `<wsse:Password Type="${PROFILE}#PasswordDigest">${digest}</wsse:Password><wsse:Nonce>${nonce.toString('base64')}</wsse:Nonce>` +
    `<wsu:Created>${created}</wsu:Created></wsse:UsernameToken></wsse:Security></s:Header>` +
    '<s:Body><GetUser xmlns="urn:graphql-query-service:soap/v1/UserService"><id>42</id></GetUser></s:Body></s:Envelope>'
}

interface Node { ns: string; local: string; children: Node[]; text: string }
function saxesTree (xml: string): Node {
  const parser = new SaxesParser({ xmlns: true, position: false })
  const stack: Node[] = []
  let root: Node | undefined
  parser.on('error', (err) => { throw err })
  parser.on('opentag', (tag) => {
    const node: Node = { ns: tag.uri, local: tag.local, children: [], text: '' }
    if (stack.length > 0) stack[stack.length - 1]!.children.push(node)
    else root = node
    if (!tag.isSelfClosing) stack.push(node)
  })
  parser.on('closetag', (tag) => { if (!tag.isSelfClosing) stack.pop() })
  parser.on('text', (text) => { if (stack.length > 0) stack[stack.length - 1]!.text += text })
  parser.write(xml).close()
  return root!
}

const fxp = new XMLParser({ ignoreAttributes: false, parseTagValue: false, processEntities: false })
const parsers: Record<string, (xml: string) => unknown> = {
  'app/soap/xml.ts': (xml) => parseXml(xml),
  saxes: saxesTree,
  'fast-xml-parser (validate + parse)': (xml) => {
    if (XMLValidator.validate(xml) !== true) throw new Error('invalid')
    return fxp.parse(xml)
  }
}

const bodies = Array.from({ length: 1000 }, digestEnvelope)
console.log(`${bodies[0]!.length}-byte envelope, ${iterations} parses each (Node ${process.versions.node})`)
for (const [name, parse] of Object.entries(parsers)) {
  for (let i = 0; i < iterations / 3; i++) parse(bodies[i % bodies.length]!)
  const start = performance.now()
  for (let i = 0; i < iterations; i++) parse(bodies[i % bodies.length]!)
  const micros = (performance.now() - start) / iterations * 1000
  console.log(`${name.padEnd(36)} ${micros.toFixed(1)} µs`)
}
