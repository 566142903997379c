// The SOAP XML reader (app/soap/xml.ts) against fast-xml-parser as a second oracle (the main one is
// saxes, in xml-differential.test.ts): on valid documents it builds the same namespace-resolved tree as
// fast-xml-parser's parser (resolved here the obvious way); on broken ones it refuses whatever
// fast-xml-parser's validator refuses, and a list of things the validator lets through (undefined
// entities, undeclared prefixes, two roots, forbidden characters). Its limits (elements, attributes,
// depth) refuse hostile shapes. Its speed is measured in bench/xml-parse.ts, not here.
import { readdirSync, readFileSync } from 'node:fs'
import { randomBytes, createHash } from 'node:crypto'
import { test } from 'tap'
import { XMLParser, XMLValidator } from 'fast-xml-parser'
import { DEFAULT_XML_LIMITS, XmlError, parseXml, type XmlElement } from '../../app/soap/xml.ts'
import { buildWsdl } from '../../app/soap/wsdl.ts'
import { SERVICE_VERSIONS } from '../../app/soap/operations.ts'
import { FIXTURES, SOAP11, WSSE, WSU, envelope, textToken } from './helpers.ts'

const oracleParser = new XMLParser({
  preserveOrder: true,
  ignoreAttributes: false,
  attributeNamePrefix: '',
  parseTagValue: false,
  parseAttributeValue: false,
  processEntities: false,
  htmlEntities: false,
  trimValues: false,
  ignoreDeclaration: true,
  ignorePiTags: true,
  cdataPropName: '#cdata'
})
const PREDEFINED: Record<string, string> = { lt: '<', gt: '>', amp: '&', quot: '"', apos: "'" }
const decode = (v: string) => v.replace(/&(#x[0-9a-fA-F]+|#[0-9]+|lt|gt|amp|quot|apos);/g, (_m, r: string) =>
  r[0] === '#' ? String.fromCodePoint(r[1] === 'x' ? parseInt(r.slice(2), 16) : parseInt(r.slice(1), 10)) : PREDEFINED[r]!)

type Node = Record<string, unknown> & { ':@'?: Record<string, string> }
function resolve (node: Node, scope: Map<string, string>): XmlElement {
  const name = Object.keys(node).find((k) => k !== ':@')!
  const attrs = node[':@'] ?? {}
  const inner = new Map(scope)
  for (const [k, v] of Object.entries(attrs)) {
    if (k === 'xmlns' || k.startsWith('xmlns:')) inner.set(k === 'xmlns' ? '' : k.slice(6), decode(v))
  }
  const split = (q: string) => q.includes(':') ? [q.slice(0, q.indexOf(':')), q.slice(q.indexOf(':') + 1)] : ['', q]
  const [prefix, local] = split(name)
  const attributes = Object.entries(attrs).filter(([k]) => k !== 'xmlns' && !k.startsWith('xmlns:')).map(([k, v]) => {
    const [p, l] = split(k)
    return { ns: p === '' ? '' : inner.get(p)!, local: l!, value: decode(v) }
  })
  const children: XmlElement[] = []
  let text = ''
  for (const child of node[name] as Node[]) {
    if ('#text' in child) text += decode(child['#text'] as string)
    else if ('#cdata' in child) text += (child['#cdata'] as Array<{ '#text': string }>)[0]?.['#text'] ?? ''
    else children.push(resolve(child, inner))
  }
  return { ns: inner.get(prefix!)!, local: local!, attributes, children, text }
}
function oracle (xml: string): XmlElement {
  const nodes = (oracleParser.parse(xml) as Node[]).filter((n) => !('#text' in n))
  return resolve(nodes[0]!, new Map([['', ''], ['xml', 'http://www.w3.org/XML/1998/namespace']]))
}

const digestEnvelope = () => {
  const nonce = randomBytes(16)
  const created = new Date().toISOString()
  return envelope('1.1', '<GetUser xmlns="https://api.example.com/v1/UserService"><id>42</id></GetUser>',
    `<wsse:Security xmlns:wsse="${WSSE}" xmlns:wsu="${WSU}"><wsse:UsernameToken><wsse:Username>p</wsse:Username>` +
    `<wsse:Password Type="http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-username-token-profile-1.0#PasswordDigest">${createHash('sha1').update(nonce).update(created).update('pw').digest('base64')}</wsse:Password>` +
    `<wsse:Nonce>${nonce.toString('base64')}</wsse:Nonce><wsu:Created>${created}</wsu:Created></wsse:UsernameToken></wsse:Security>`)
}

const valid: string[] = [
  ...readdirSync(FIXTURES).filter((f) => f.endsWith('.xml')).map((f) => readFileSync(new URL(f, FIXTURES), 'utf8')),
  ...SERVICE_VERSIONS.map((v) => buildWsdl(v, 'https://api.example.com', `https://api.example.com${v.path}`)),
  digestEnvelope(),
  envelope('1.1', '<a:Op xmlns:a="urn:a"><a:x>007</a:x><y>&lt;&amp;&gt;&quot;&apos;&#65;&#x42;&#x1F600;</y></a:Op>', textToken('u', 'p&amp;w')),
  '<?xml version=\'1.0\' encoding=\'UTF-8\' standalone=\'yes\'?>\n<!-- c --><?pi data?>\n<r xmlns="urn:d" xmlns:p=\'urn:p\' p:a=\'1\' b = "2" >\n  <p:c><![CDATA[<not> &markup;]]>tail</p:c>\n  <e xmlns=""><f/></e><p:g xmlns:p="urn:other"/>\n</r>\n<!-- after -->\n',
  '<r><a.b-c_d>text &#10; more</a.b-c_d><é x="ü"/></r>',
  `<s:Envelope xmlns:s="${SOAP11}"><s:Body><x:y xmlns:x="urn:x" x:nil="true" xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance" xsi:type="x:t"/></s:Body></s:Envelope>`
]

const brokenForBoth: string[] = [
  '', 'text', '<a>', '<a></b>', '<a><b></a></b>', '<a x=1/>', '<a x/>', '<a x="1" x="2"/>', '<a>1 < 2</a>', '</a>',
  '<a x="1"y="2"/>', '<1a/>', '<a></a>junk', '<a><![CDATA[x</a>', '<a b="1>', '<?xml version="1.0"?><?xml version="1.0"?><a/>'
]
const brokenForUsOnly: string[] = [
  '<a x="<"/>', '<a/><!-- --', '<a>&foo;</a>', '<a>AT&T</a>', '<a x="&unknown;"/>', '<p:a/>', '<a p:x="1"/>', '<a/><b/>', '<a>\u0001</a>', '<a>&#0;</a>',
  '<a xmlns:p="urn:x" xmlns:q="urn:x" p:x="1" q:x="2"/>', '<!DOCTYPE a><a/>', '<a><!DOCTYPE b></a>', '<a>]]></a>', '<a><!-- a -- b --></a>', '<a:b:c xmlns:a="urn:a"/>'
]

test('valid documents: the same tree as fast-xml-parser resolves', async (t) => {
  for (const xml of valid) {
    t.equal(XMLValidator.validate(xml), true, 'the oracle accepts it')
    t.same(parseXml(xml), oracle(xml), xml.slice(0, 80))
  }
  const tree = parseXml(valid.at(-3)!)
  t.same(
    tree.children.map((c) => [c.ns, c.local]),
    [
      ['urn:p', 'c'],
      ['', 'e'],
      ['urn:other', 'g']
    ],
    'namespaces resolved, default undeclared, prefix redeclared'
  )
  t.equal(tree.children[0]!.text, '<not> &markup;tail', 'CDATA kept verbatim')
})

test('broken documents: refused, like fast-xml-parser\'s validator does, and more', async (t) => {
  for (const xml of brokenForBoth) {
    t.not(XMLValidator.validate(xml), true, `oracle refuses ${JSON.stringify(xml)}`)
    t.throws(() => parseXml(xml), XmlError, `refused: ${JSON.stringify(xml)}`)
  }
  for (const xml of brokenForUsOnly) t.throws(() => parseXml(xml), XmlError, `refused: ${JSON.stringify(xml)}`)
  const doctype = (() => {
    try {
      return parseXml('<!DOCTYPE a [<!ENTITY x "y">]><a>&x;</a>')
    } catch (err) {
      return err
    }
  })()
  t.match(doctype, { name: 'XmlError', policy: true }, 'a DOCTYPE is reported as such')
})

test('hostile shapes: attributes per element and elements per document are capped, depth too; long text is fine', async (t) => {
  const attributes = (count: number) => `<a ${Array.from({ length: count }, (_, i) => `a${i}="${i}"`).join(' ')}/>`
  const { maxAttributes, maxElements } = DEFAULT_XML_LIMITS
  t.equal(parseXml(attributes(maxAttributes)).attributes.length, maxAttributes, 'up to the cap')
  t.throws(() => parseXml(attributes(maxAttributes + 1)), {
    name: 'XmlError',
    policy: true,
    message: `An element has more than ${maxAttributes} attributes`
  })
  t.throws(() => parseXml(`<a xmlns:p="urn:p" ${Array.from({ length: maxAttributes }, (_, i) => `p:a${i}="${i}"`).join(' ')}/>`), /more than 32 attributes/, 'namespace declarations count')
  t.equal(
    parseXml(`<a>${'<b/>'.repeat(maxElements - 1)}</a>`).children.length,
    maxElements - 1,
    'up to the element cap'
  )
  t.throws(() => parseXml(`<a>${'<b/>'.repeat(maxElements)}</a>`), {
    name: 'XmlError',
    policy: true,
    message: `The message has more than ${maxElements} elements`
  })
  t.throws(() => parseXml('<a><b/><c/></a>', { maxElements: 2, maxAttributes: 4 }), /more than 2 elements/, 'configurable')
  // Past the caps (raised here), the duplicate check stays correct on many attributes.
  const many = { maxElements: 10, maxAttributes: 100_000 }
  t.equal(parseXml(attributes(50_000), many).attributes.length, 50_000)
  t.throws(() => parseXml(attributes(50_000).replace('/>', ' a0="x"/>'), many), /attribute a0 repeated/)
  t.throws(() => parseXml('<a>'.repeat(101) + '</a>'.repeat(101)), /nested deeper than 100/)
  t.equal(parseXml('<a>'.repeat(100) + '</a>'.repeat(100)).local, 'a', '100 levels are fine')
  t.equal(parseXml(`<a>${'x&amp;'.repeat(100_000)}</a>`).text.length, 200_000)
})
