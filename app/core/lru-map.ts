// A Map that forgets its least recently used entries beyond a bound: a number of entries and,
// optionally, a total weight (bytes) given per entry. Every cache in the service is one of these, so
// none grows with what callers send. (WS-Security's nonce store is no cache: it must not forget a live
// nonce, so when full it refuses new ones instead; see app/soap/ws-security.ts.)
export class LruMap<K, V> {
  readonly max: number
  readonly maxWeight: number
  readonly #map = new Map<K, { value: V; weight: number }>()
  #weight = 0
  /** The key used or set last: it sits at the end of the Map's order. */
  #newest: K | undefined

  constructor (max: number, maxWeight = Infinity) {
    this.max = max
    this.maxWeight = maxWeight
  }

  get (key: K): V | undefined {
    const entry = this.#map.get(key)
    if (entry === undefined) return undefined
    // Already the most recently used (a hot key asked for again and again): nothing to reorder.
    if (key !== this.#newest) {
      this.#map.delete(key)
      this.#map.set(key, entry)
      this.#newest = key
    }
    return entry.value
  }

  /** The value kept for `key`, without counting it as a use (its place in the eviction order stays). */
  peek (key: K): V | undefined {
    return this.#map.get(key)?.value
  }

  /** Keeps `value` unless it alone weighs more than the bound (then it is not kept at all). */
  set (key: K, value: V, weight = 0): void {
    this.delete(key)
    if (this.max <= 0 || weight > this.maxWeight) return
    this.#map.set(key, { value, weight })
    this.#newest = key
    this.#weight += weight
    while (this.#map.size > this.max || this.#weight > this.maxWeight) this.delete(this.#map.keys().next().value!)
  }

  delete (key: K): void {
    const entry = this.#map.get(key)
    if (entry === undefined) return
    this.#map.delete(key)
    this.#weight -= entry.weight
    if (key === this.#newest) this.#newest = undefined
  }

  clear (): void {
    this.#map.clear()
    this.#weight = 0
    this.#newest = undefined
  }

  get size (): number { return this.#map.size }
  /** The total weight of the entries kept. */
  get weight (): number { return this.#weight }
}
