// What a signature's cryptography reads: xmldom's reading of the same text as our hardened reader's
// (app/soap/xml.ts), element by element checked to read alike, and the exclusive canonicalisation of its
// elements (xml-crypto's: the library node-soap signs with). signature.ts decides what is verified.
import { DOMParser } from '@xmldom/xmldom'
import { ExclusiveCanonicalization, ExclusiveCanonicalizationWithComments } from 'xml-crypto'
import type { XmlElement } from './envelope.ts'
import { SoapFault } from './faults.ts'

export const EXC_C14N = 'http://www.w3.org/2001/10/xml-exc-c14n#'
export const EXC_C14N_COMMENTS = 'http://www.w3.org/2001/10/xml-exc-c14n#WithComments'
const XMLNS_NS = 'http://www.w3.org/2000/xmlns/'

/** A DOM of the same text for the canonicaliser; the reader accepted it already, so any complaint is a refusal. */
export function domOf (xml: string): Document {
  const fail = (message: string) => { throw SoapFault.invalidSecurity(`The signed message could not be read: ${message}`) }
  const parser = new DOMParser({ errorHandler: { warning: () => {}, error: fail, fatalError: fail } })
  return parser.parseFromString(xml, 'text/xml')
}

const inconsistent = () => SoapFault.invalidSecurity('The signed message could not be read consistently')

function elementChildren (node: Node): Element[] {
  return Array.from(node.childNodes).filter((n): n is Element => n.nodeType === 1)
}

/** Names, attributes (namespace declarations aside) and text of one element, as our reader and xmldom read it. */
function describeOurs (element: XmlElement): string {
  const attributes = element.attributes.map((a) => `{${a.ns}}${a.local}=${JSON.stringify(a.value)}`).sort().join(' ')
  return `{${element.ns}}${element.local} ${attributes} ${JSON.stringify(element.text)}`
}

function describeDom (element: Element): string {
  const attributes = Array.from(element.attributes).filter((a) => a.namespaceURI !== XMLNS_NS)
    .map((a) => `{${a.namespaceURI ?? ''}}${a.localName}=${JSON.stringify(a.value)}`).sort().join(' ')
  const text = Array.from(element.childNodes).filter((n) => n.nodeType === 3 || n.nodeType === 4)
    .map((n) => (n as CharacterData).data).join('')
  return `{${element.namespaceURI ?? ''}}${element.localName} ${attributes} ${JSON.stringify(text)}`
}

/**
 * xmldom's element at the position of `element` in our tree (child index by child index from the root),
 * which must read as ours does (its names, attributes and text; with `deep`, those of every descendant).
 */
export function domElementOf (doc: Document, element: XmlElement, parents: Map<XmlElement, XmlElement>,
  deep: boolean): Element {
  const path: number[] = []
  for (let e = element, p = parents.get(e); p; e = p, p = parents.get(e)) path.push(p.children.indexOf(e))
  let node: Element | undefined = doc.documentElement ?? undefined
  for (let i = path.length - 1; i >= 0 && node; i--) node = elementChildren(node)[path[i]!]
  if (!node) throw inconsistent()
  const pending: Array<[XmlElement, Element]> = [[element, node]]
  while (pending.length > 0) {
    const [ours, theirs] = pending.pop()!
    const children = elementChildren(theirs)
    if (describeOurs(ours) !== describeDom(theirs)) throw inconsistent()
    if (deep && children.length !== ours.children.length) throw inconsistent()
    if (deep) ours.children.forEach((c, i) => pending.push([c, children[i]!]))
  }
  return node
}

/** Namespace declarations in scope at `element` (for an InclusiveNamespaces prefix list), nearest first. */
function ancestorNamespaces (element: Element) {
  const found: Array<{ prefix: string; namespaceURI: string }> = []
  for (let e = element.parentNode; e && e.nodeType === 1; e = e.parentNode) {
    for (const a of Array.from((e as Element).attributes)) {
      if (a.namespaceURI === XMLNS_NS && a.prefix === 'xmlns' && !found.some((f) => f.prefix === a.localName)) {
        found.push({ prefix: a.localName!, namespaceURI: a.value })
      }
    }
  }
  return found
}

/** Exclusive C14N of one element in its document (xml-crypto's), with an InclusiveNamespaces prefix list. */
export function canonical (element: Element, algorithm: string, prefixes: string[]): string {
  const c14n = algorithm === EXC_C14N_COMMENTS
    ? new ExclusiveCanonicalizationWithComments()
    : new ExclusiveCanonicalization()
  return c14n.process(element, {
    inclusiveNamespacesPrefixList: prefixes, ancestorNamespaces: ancestorNamespaces(element)
  })
}
