/** Fragments F0 … Fn where each spreads the next twice: 2^n fields in a document of a few hundred bytes. */
export function fragmentChain (levels: number): string {
  const fragments = Array.from({ length: levels }, (_, i) => `fragment F${i} on User { ...F${i + 1} ...F${i + 1} }`)
  return `{ users(limit: 1) { ...F0 } } ${fragments.join(' ')} fragment F${levels} on User { id }`
}
