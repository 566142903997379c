// The hand-written XML reader (app/soap/xml.ts) against saxes, a conformant, namespace-aware XML
// 1.0 parser, on generated documents (fast-check): it must accept exactly the documents saxes accepts
// and build the same tree (namespace-resolved elements and attributes, character data with references
// decoded, line ends and attribute whitespace normalized), under the service's own refusals, applied
// explicitly to both sides here:
// - a DOCTYPE (or any other markup declaration): refused, so no entity is ever defined or expanded;
// - a namespace name holding whitespace (JavaScript's \s): refused (saxes trims it; a URI has none);
// - XML 1.0 only: a declaration of another version is refused (saxes would apply XML 1.1's rules);
// - lone surrogates anywhere: refused (saxes lets some through in attribute values; they are no
//   characters, and a body decoded from UTF-8 never holds one);
// - namespace declarations are not attributes of the tree (both sides leave them out).
// Documents are generated well-formed from random trees (prefixes, default namespaces and their
// undeclaration, attributes with both quotes, entity and character references, CDATA, comments,
// processing instructions, XML declarations with versions, encodings and standalone, a BOM, depth),
// then mutated (characters and markup fragments inserted, deleted, replaced), so most mutants are
// broken in some way the two parsers must agree on.
import { test } from 'tap'
import fc from 'fast-check'
import { SaxesParser, type SaxesTagNS } from 'saxes'
import { parseXml, XmlError, type XmlElement } from '../../app/soap/xml.ts'

const NO_LIMITS = { maxElements: 1_000_000, maxAttributes: 1_000_000 }
type Outcome = XmlElement | 'refused'

/** Our reader's verdict. */
function ours (xml: string): Outcome {
  try {
    return parseXml(xml, NO_LIMITS)
  } catch (err) {
    if (err instanceof XmlError) return 'refused'
    throw err
  }
}

const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/

/** saxes's verdict, as the same tree, under the service's own refusals (see the top of the file). */
function theirs (xml: string): Outcome {
  const parser = new SaxesParser({ xmlns: true, position: false })
  let refused = false
  let root: XmlElement | null = null
  const stack: XmlElement[] = []
  if (LONE_SURROGATE.test(xml)) return 'refused'
  parser.on('error', () => { refused = true })
  parser.on('xmldecl', (decl) => { if (decl.version !== '1.0') refused = true })
  parser.on('doctype', () => { refused = true })
  parser.on('opentag', (tag) => {
    const t = tag as SaxesTagNS
    const declarations = Object.values(t.attributes).filter((a) => a.prefix === 'xmlns' || a.name === 'xmlns')
    if (declarations.some((a) => /\s/.test(a.value))) refused = true
    const attributes = Object.values(t.attributes)
      .filter((a) => a.prefix !== 'xmlns' && a.name !== 'xmlns')
      .map((a) => ({ ns: a.uri, local: a.local, value: a.value }))
    const element: XmlElement = { ns: t.uri, local: t.local, attributes, children: [], text: '' }
    if (stack.length > 0) stack[stack.length - 1]!.children.push(element)
    else root ??= element
    if (!t.isSelfClosing) stack.push(element)
  })
  parser.on('closetag', (tag) => { if (!tag.isSelfClosing) stack.pop() })
  parser.on('text', (text) => { if (stack.length > 0) stack[stack.length - 1]!.text += text })
  parser.on('cdata', (text) => { if (stack.length > 0) stack[stack.length - 1]!.text += text })
  try {
    parser.write(xml).close()
  } catch {
    refused = true
  }
  return refused || root === null ? 'refused' : root
}

// ---- well-formed documents from random trees ----

const NAMES = ['a', 'b', 'Envelope', 'x-y', 'n.1', '_u', 'é', 'a\u00B7b', '\u4E2D', 'A1']
const URIS = ['urn:a', 'urn:b', 'http://schemas.xmlsoap.org/soap/envelope/', 'http://x/?q=1&amp;r=2', 'urn:&#x41;']
const PREFIXES = ['p', 'q', 'soap', 'ns0', 'xml']
const TEXT_PIECES = ['text', ' ', '\n', '\r\n', '\r', '\t', '&lt;', '&gt;', '&amp;', '&quot;', '&apos;', '&#65;', '&#x1F600;', '&#10;', '&#13;', '&#x9;', 'é', '\u00A0', '\uD835\uDCB3', '>', ']]', '"', "'", '007']
const ATTR_PIECES = ['v', ' ', '\t', '\n', '\r\n', '&lt;', '&amp;', '&#x20;', '&#10;', '&#9;', '>', 'é', '\uD835\uDCB3', '']

interface Node {
  name: string
  prefix: string | null
  declare: Array<[string | null, string]>
  attrs: Array<[string | null, string, string, string]>
  content: Array<Node | string>
  selfClose: boolean
}

const text = fc.array(fc.constantFrom(...TEXT_PIECES), { maxLength: 5 }).map((p) => p.join(''))
const attrValue = fc.array(fc.constantFrom(...ATTR_PIECES), { maxLength: 4 }).map((p) => p.join(''))
const misc = fc.oneof(
  fc.constantFrom('<!-- c -->', '<!---->', '<!-- a-b -->', '<?pi data?>', '<?pi?>', '<?x-y  a b ?>', ' ', '\n'),
  text.map((t) => `<!--${t.replaceAll('-', '')}-->`)
)
const contentPiece = fc.oneof(
  { weight: 3, arbitrary: text },
  { weight: 1, arbitrary: text.map((t) => `<![CDATA[${t.replaceAll(']]>', '')}]]>`) },
  { weight: 1, arbitrary: misc }
)

const node: fc.Memo<Node> = fc.memo((depth) =>
  fc.record({
    name: fc.constantFrom(...NAMES),
    prefix: fc.option(fc.constantFrom(...PREFIXES.filter((p) => p !== 'xml')), { freq: 2 }),
    declare: fc.array(
      fc.tuple(fc.option(fc.constantFrom(...PREFIXES.filter((p) => p !== 'xml'))), fc.constantFrom(...URIS, '')),
      { maxLength: 2 }
    ),
    attrs: fc.array(
      fc.tuple(
        fc.option(fc.constantFrom('p', 'q', 'xml'), { freq: 3 }),
        fc.constantFrom(...NAMES),
        attrValue,
        fc.constantFrom('"', "'")
      ),
      { maxLength: 3 }
    ),
    content:
      depth > 1
        ? fc.array(fc.oneof({ weight: 2, arbitrary: contentPiece }, { weight: 1, arbitrary: node(depth - 1) }), {
          maxLength: 4
        })
        : fc.array(contentPiece, { maxLength: 2 }),
    selfClose: fc.boolean()
  })
)

/** Writes a node as well-formed XML where it can (declares the prefixes it uses, avoids duplicate attributes). */
function serialize (n: Node, inScope: Set<string>): string {
  const scope = new Set(inScope)
  const decls: string[] = []
  const declare = (prefix: string | null, uri: string) => {
    if (prefix === null) decls.push(`xmlns="${uri}"`)
    else if (uri !== '') { decls.push(`xmlns:${prefix}="${uri}"`); scope.add(prefix) }
  }
  for (const [prefix, uri] of n.declare) {
    if (!decls.some((d) => d.startsWith(prefix === null ? 'xmlns=' : `xmlns:${prefix}=`))) declare(prefix, uri)
  }
  if (n.prefix !== null && !scope.has(n.prefix)) declare(n.prefix, 'urn:declared-for-element')
  const attrs: string[] = []
  const seen = new Set<string>()
  for (const [prefix, local, value, quote] of n.attrs) {
    if (prefix === 'p' || prefix === 'q') { if (!scope.has(prefix)) declare(prefix, `urn:${prefix}`) }
    const key = `${prefix === null ? '' : prefix === 'xml' ? 'xml' : `urn:${prefix}`}|${local}`
    if (seen.has(key)) continue
    seen.add(key)
    attrs.push(
      `${prefix === null ? '' : prefix + ':'}${local}=${quote}${value.replaceAll(quote, quote === '"' ? '&quot;' : '&apos;')}${quote}`
    )
  }
  const qname = n.prefix === null ? n.name : `${n.prefix}:${n.name}`
  const head = [qname, ...decls, ...attrs].join(' ')
  if (n.selfClose && n.content.length === 0) return `<${head}/>`
  return `<${head}>${n.content.map((c) => typeof c === 'string' ? c : serialize(c, scope)).join('')}</${qname}>`
}

const declaration = fc.oneof(
  fc.constant(''),
  fc.record({
    version: fc.constantFrom('1.0', '1.0', '1.1', '1.9'),
    encoding: fc.option(fc.constantFrom('utf-8', 'UTF-8', 'ISO-8859-1', 'x.y-z')),
    standalone: fc.option(fc.constantFrom('yes', 'no')),
    quote: fc.constantFrom('"', "'"),
    space: fc.constantFrom(' ', '  ', '\n')
  }).map(({ version, encoding, standalone, quote, space }) => `<?xml${space}version=${quote}${version}${quote}` +
    (encoding !== null ? ` encoding=${quote}${encoding}${quote}` : '') + (standalone !== null ? ` standalone=${quote}${standalone}${quote}` : '') + '?>')
)

const document = fc.record({
  bom: fc.boolean(),
  declaration,
  before: fc.array(misc, { maxLength: 2 }),
  root: node(5),
  after: fc.array(misc, { maxLength: 2 })
}).map(({ bom, declaration, before, root, after }) =>
  (bom ? '\uFEFF' : '') + declaration + before.join('') + serialize(root, new Set()) + after.join(''))

// ---- mutations ----

const FRAGMENTS = ['<', '>', '&', ';', '"', "'", '=', '/', '!', '?', '[', ']', '-', ':', ' ', '\r', '\t', 'x', '\u0001', '\u00A0', '\uFFFE',
  '<!DOCTYPE a>', '<!DOCTYPE a [<!ENTITY e "x">]>', '<!ENTITY e "x">', '&e;', '&#0;', '&#xD800;', '&#x10FFFF;', '&amp', ']]>', '<![CDATA[', '--', '-->',
  '<?xml version="1.0"?>', '<?xml ', '<?XML x?>', '<?a:b c?>', 'xmlns:p=""', ' xmlns:xmlns="urn:x"', ' xmlns:xml="urn:x"', ' xmlns:p="http://www.w3.org/XML/1998/namespace"',
  ' xmlns:p="http://www.w3.org/2000/xmlns/"', ' xml:lang="en"', ' a="1"', ' p:a="1"', '<a/>', '</a>', '<p:a>', '<xmlns:a/>', '<:a/>', '<a:/>', '<a:b:c/>', '\uD800', '\uDC00', '\u0085', '\u2028']

const mutated = fc.tuple(document, fc.array(fc.record({
  at: fc.nat(),
  remove: fc.nat({ max: 3 }),
  insert: fc.oneof(fc.constantFrom(...FRAGMENTS), fc.constant(''))
}), { minLength: 1, maxLength: 3 })).map(([doc, edits]) => {
  let s = doc
  for (const { at, remove, insert } of edits) {
    const i = s.length === 0 ? 0 : at % (s.length + 1)
    s = s.slice(0, i) + insert + s.slice(i + remove)
  }
  return s
})

const sameVerdict = (xml: string) => {
  const a = ours(xml)
  const b = theirs(xml)
  if (JSON.stringify(a) !== JSON.stringify(b)) {
    throw new Error(
      `disagreement on ${JSON.stringify(xml)}\n ours:   ${JSON.stringify(a)}\n saxes:  ${JSON.stringify(b)}`
    )
  }
}

test('generated well-formed documents: both accept them with the same tree', async (t) => {
  let accepted = 0
  fc.assert(fc.property(document, (xml) => {
    sameVerdict(xml)
    if (ours(xml) !== 'refused') accepted++
  }), { numRuns: 3000 })
  t.ok(
    accepted > 1500,
    `most generated documents are acceptable (${accepted} of 3000): the generator does not only make broken ones`
  )
})

test('mutated documents: both refuse or both accept with the same tree', async (t) => {
  let refused = 0
  fc.assert(fc.property(mutated, (xml) => {
    sameVerdict(xml)
    if (ours(xml) === 'refused') refused++
  }), { numRuns: 6000 })
  t.ok(refused > 1500, `mutations break many documents (${refused} of 6000 refused by both)`)
})

test('known edge cases agree', async (t) => {
  const cases = [
    '<a>x</a>', '<a/>', '\uFEFF<a/>', ' <a/>', '<a/> ', '<a>\r\n</a>', '<a b="x\ny"/>', '<a b="&#10;"/>', '<!--a--><a/>', '<a><!--a---></a>', '<a><?xml x?></a>',
    '<?xml version="1.0"?><a/>', ' <?xml version="1.0"?><a/>', '<?xml version="1.1"?><a/>', '<?xml version="2.0"?><a/>', '<a>\u0085</a>', '<a:b xmlns:a="urn:a"/>',
    '<a xmlns:xml="http://www.w3.org/XML/1998/namespace"/>', '<a xmlns:p="http://www.w3.org/XML/1998/namespace"/>', '<a xmlns="http://www.w3.org/2000/xmlns/"/>',
    '<xmlns:a xmlns:xmlns="urn:x"/>', '<a>\u00A0</a>\u00A0', '<?a:b?><a/>', '<?ab?><a/>', '<a>&#x10FFFF;</a>', '<\uD800a/>', '<a\uDB40\uDC00/>', '<!DOCTYPE a><a/>'
  ]
  for (const xml of cases) t.doesNotThrow(() => sameVerdict(xml), JSON.stringify(xml))
})
