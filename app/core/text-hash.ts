// A fast non-cryptographic hash of texts: the digest the response cache keeps of an answer and the
// ETags of answers are made from it (app/graphql/http-cache.ts).

/**
 * A 64-bit hash of texts, as 16 hex digits: two 32-bit FNV-1a-style lanes with different multipliers,
 * mixed at the end (cyrb53's finaliser). Not cryptographic: an ETag only has to change when the
 * answer to the same request changes, and a client gains nothing by forging one (it only chooses
 * whether its own request is answered 304). The texts are read in place, never joined. Nothing
 * that must resist a chosen collision may rely on it (cache keys are compared whole).
 */
export function textHash (...texts: string[]): string {
  let h1 = 0xdeadbeef
  let h2 = 0x41c6ce57
  for (const text of texts) {
    for (let i = 0; i < text.length; i++) {
      const c = text.charCodeAt(i)
      h1 = Math.imul(h1 ^ c, 2654435761)
      h2 = Math.imul(h2 ^ c, 1597334677)
    }
    // A separator, so ("ab", "c") and ("a", "bc") differ.
    h1 = Math.imul(h1 ^ 0xffff, 2654435761)
    h2 = Math.imul(h2 ^ 0xffff, 1597334677)
  }
  h1 = Math.imul(h1 ^ (h1 >>> 16), 2246822507) ^ Math.imul(h2 ^ (h2 >>> 13), 3266489909)
  h2 = Math.imul(h2 ^ (h2 >>> 16), 2246822507) ^ Math.imul(h1 ^ (h1 >>> 13), 3266489909)
  return (h1 >>> 0).toString(16).padStart(8, '0') + (h2 >>> 0).toString(16).padStart(8, '0')
}
