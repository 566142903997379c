// The in-process store of the response cache (the embedded default), with the same sequence scheme as
// Redis (response-cache.ts): a counter and marks in this process. It serves one instance: instances
// that share a database share a Redis store instead.
//
// Entries live outside V8's heap, in one block of RESPONSE_CACHE_MAX_BYTES allocated once (its pages
// count in RSS as they are first written), so the bound is what the process grows by. Kept as strings
// and objects on the heap, as they were, entries measured 3.3 times their bound in RSS growth: every
// evicted entry dies in V8's old generation, whose size the collector lets grow to a multiple of what
// lives there, and does not give back. Here an entry is a record in the block (a header of numbers,
// the hashes of its tags, then its key, body and tags as UTF-8), and the index is a typed array at the
// block's start: nothing of an entry is on the heap until a lookup reads its body.
//
// The block is a ring of segments filled one after another; when the ring is full the oldest segment
// is emptied whole (its entries leave the index) and written again: first in, first out, except that
// an entry read while it sits in the oldest quarter of the ring is written again at the head (a second
// chance), so entries in use stay while the rest cycle out.
//
// Invalidation marks are kept by the hash of their tag, and a record carries its tags' hashes: a
// lookup checks them without decoding a tag. Two tags with one hash can only make a write drop more
// than it changed, never less.
import type { CacheStore, CachedAnswer } from './response-cache.ts'

export interface MemoryStoreOptions {
  /**
   * The bound on the memory entries take, in bytes: the one block they and their index live in.
   * Default 64 MiB: thousands of typical answers (a user is a few hundred bytes, a page of 100 a few
   * tens of KB) for a bounded share of a small container's memory.
   */
  maxBytes?: number
  /** How long an entry may live (the cache's TTL): marks older than this concern no entry and are dropped. */
  ttlMs: number
  /**
   * The most marks kept (tags invalidated within the TTL). Default 100 000. Past it every mark is
   * dropped at once and every older entry counts as invalidated (a rare flush instead of unbounded marks).
   */
  maxMarks?: number
  /** Epoch-ms clock (tests). */
  now?: () => number
}

export const DEFAULT_MAX_BYTES = 64 * 1024 * 1024
const DEFAULT_MAX_MARKS = 100_000

// A record: a header of numbers, its tags' hashes (u32 each), then the key, the body and the tags (a
// JSON array) as UTF-8.
const KEY_BYTES = 0 // u32
const BODY_BYTES = 4 // u32
const TAGS_BYTES = 8 // u32
const NEXT = 12 // i32: the next record of the same bucket, or -1
const HASH = 16 // u32: the key's hash
const LIVE = 20 // u32: 1 while the index holds it
const SINCE = 24 // f64: the write sequence its computation began at
const CREATED_AT = 32 // f64
const EXPIRES = 40 // f64
const TAG_COUNT = 48 // u32
const DIGEST = 52 // 16 latin1 characters: the body's digest (CachedAnswer.digest)
const HEADER_BYTES = 68
/** Records start on 8-byte boundaries (the header's doubles are read in place). */
const align = (n: number) => (n + 7) & ~7

/** Buckets of the index: one per this many bytes of records (about two typical entries a bucket at most). */
const BYTES_PER_BUCKET = 256
/** Segments of the ring: eviction empties one, a sixteenth of the cache, at a time. */
const SEGMENTS = 16

/** How a block of `maxBytes` is laid out: the index first, then the ring's SEGMENTS segments. */
export function blockLayout (maxBytes: number): { indexBytes: number; segmentBytes: number; segments: number } {
  const buckets = 2 ** Math.max(4, Math.ceil(Math.log2(maxBytes / BYTES_PER_BUCKET)))
  const indexBytes = align(buckets * 4)
  const segmentBytes = Math.floor(Math.max(0, maxBytes - indexBytes) / SEGMENTS) & ~7
  return { indexBytes, segmentBytes, segments: SEGMENTS }
}

/** FNV-1a over a text's UTF-16 units, in 30 bits (a small integer to V8). */
function hashOf (text: string): number {
  let hash = 0x811c9dc5
  for (let i = 0; i < text.length; i++) hash = Math.imul(hash ^ text.charCodeAt(i), 16777619)
  return hash & 0x3fffffff
}

/** The bytes a record of this entry takes in the block: header, tag hashes, key, body and tags, aligned. */
export function entryBytes (key: string, entry: Pick<CachedAnswer, 'body' | 'tags'>): number {
  return align(HEADER_BYTES + 4 * entry.tags.length + Buffer.byteLength(key) + Buffer.byteLength(entry.body) +
    Buffer.byteLength(JSON.stringify(entry.tags)))
}

interface Mark {
  seq: number
  at: number
}

/** An entry read out of the block: its tags are decoded only if someone asks for them. */
class StoredAnswer implements CachedAnswer {
  readonly body: string
  readonly digest: string
  readonly createdAt: number
  #tags: readonly string[] | string
  constructor (body: string, digest: string, createdAt: number, tags: string) {
    this.body = body
    this.digest = digest
    this.createdAt = createdAt
    this.#tags = tags
  }

  get tags (): readonly string[] {
    if (typeof this.#tags === 'string') this.#tags = JSON.parse(this.#tags) as string[]
    return this.#tags
  }
}

export class MemoryCacheStore implements CacheStore {
  readonly #maxBytes: number
  readonly #ttlMs: number
  readonly #maxMarks: number
  readonly #now: () => number
  /** The block (allocated on the first write), its index at its start and the segments after. */
  #block: Buffer | null = null
  #buckets: Int32Array | null = null
  readonly #segmentBytes: number
  readonly #segmentStart: number
  /** Bytes written in each segment; the segment being written; records held and their bytes. */
  readonly #filled = new Uint32Array(SEGMENTS)
  #current = 0
  #count = 0
  #bytes = 0
  /** A lookup's key as UTF-8, to compare with a record's without making a string of it. */
  #scratch = Buffer.allocUnsafe(1024)

  #seq = 0
  /** Marks by their tag's hash, oldest first (a tag invalidated again moves to the end). */
  readonly #marks = new Map<number, Mark>()
  /** Entries that began before this sequence count as invalidated (the marks were dropped to stay bounded). */
  #floor = 0

  constructor (options: MemoryStoreOptions) {
    this.#maxBytes = options.maxBytes ?? DEFAULT_MAX_BYTES
    this.#ttlMs = options.ttlMs
    this.#maxMarks = options.maxMarks ?? DEFAULT_MAX_MARKS
    this.#now = options.now ?? Date.now
    const layout = blockLayout(this.#maxBytes)
    this.#segmentStart = layout.indexBytes
    this.#segmentBytes = layout.segmentBytes
  }

  async begin (): Promise<number> {
    return this.#seq
  }

  async get (key: string): Promise<CachedAnswer | number> {
    const block = this.#block
    if (block === null || this.#count === 0) return this.#seq
    const at = this.#find(block, key)
    if (at === -1) return this.#seq
    if (block.readDoubleLE(at + EXPIRES) <= this.#now() || this.#recordInvalidated(block, at)) {
      this.#unlink(block, at)
      return this.#seq
    }
    const bodyAt = at + HEADER_BYTES + 4 * block.readUInt32LE(at + TAG_COUNT) + block.readUInt32LE(at + KEY_BYTES)
    const tagsAt = bodyAt + block.readUInt32LE(at + BODY_BYTES)
    const entry = new StoredAnswer(
      block.toString('utf8', bodyAt, tagsAt),
      block.toString('latin1', at + DIGEST, at + DIGEST + 16),
      block.readDoubleLE(at + CREATED_AT),
      block.toString('utf8', tagsAt, tagsAt + block.readUInt32LE(at + TAGS_BYTES))
    )
    // A second chance: read while it sits in the oldest quarter of the ring, it is written again at the head.
    if (this.#ageOfSegment(this.#segmentOf(at)) >= SEGMENTS * 3 / 4) {
      this.#write(key, entry, block.readDoubleLE(at + SINCE), block.readDoubleLE(at + EXPIRES))
    }
    return entry
  }

  async set (key: string, entry: CachedAnswer, since: number, ttlMs: number): Promise<boolean> {
    if (since < this.#floor) return false
    for (const tag of entry.tags) if (this.#invalidatedAfter(hashOf(tag), since)) return false
    return this.#write(key, entry, since, this.#now() + ttlMs)
  }

  async invalidate (tags: readonly string[]): Promise<void> {
    const at = this.#now()
    const seq = ++this.#seq
    for (const tag of tags) {
      const hash = hashOf(tag)
      this.#marks.delete(hash)
      this.#marks.set(hash, { seq, at })
    }
    // Drop the marks older than any live entry, oldest first; past the bound, all of them (see #floor).
    for (const [hash, mark] of this.#marks) {
      if (mark.at > at - this.#ttlMs) break
      this.#marks.delete(hash)
    }
    if (this.#marks.size > this.#maxMarks) {
      this.#marks.clear()
      this.#floor = seq
    }
  }

  async invalidateAll (): Promise<void> {
    this.#floor = ++this.#seq
    this.#marks.clear()
    this.#buckets?.fill(-1)
    this.#filled.fill(0)
    this.#count = 0
    this.#bytes = 0
  }

  /** Bytes of the records held (the block itself is RESPONSE_CACHE_MAX_BYTES, index included, once written). */
  get bytes (): number {
    return this.#bytes
  }

  /** Entries held (tests, measurements). */
  get size (): number {
    return this.#count
  }

  /** Marks held (tests: they stay bounded). */
  get markCount (): number {
    return this.#marks.size
  }

  #invalidatedAfter (tagHash: number, since: number): boolean {
    return (this.#marks.get(tagHash)?.seq ?? 0) > since
  }

  /** Whether a tag of the record was invalidated after its computation began. */
  #recordInvalidated (block: Buffer, at: number): boolean {
    const since = block.readDoubleLE(at + SINCE)
    if (since < this.#floor) return true
    if (this.#marks.size === 0) return false
    const end = at + HEADER_BYTES + 4 * block.readUInt32LE(at + TAG_COUNT)
    for (let tag = at + HEADER_BYTES; tag < end; tag += 4) {
      if (this.#invalidatedAfter(block.readUInt32LE(tag), since)) return true
    }
    return false
  }

  /** The record of `key`, or -1. */
  #find (block: Buffer, key: string): number {
    const hash = hashOf(key)
    const length = Buffer.byteLength(key)
    if (length > this.#scratch.length) this.#scratch = Buffer.allocUnsafe(length)
    this.#scratch.write(key, 0, 'utf8')
    for (let at = this.#buckets![hash & (this.#buckets!.length - 1)]!; at !== -1; at = block.readInt32LE(at + NEXT)) {
      if (block.readUInt32LE(at + HASH) !== hash || block.readUInt32LE(at + KEY_BYTES) !== length) continue
      const keyAt = at + HEADER_BYTES + 4 * block.readUInt32LE(at + TAG_COUNT)
      if (this.#scratch.compare(block, keyAt, keyAt + length, 0, length) === 0) return at
    }
    return -1
  }

  /**
   * Writes the entry at the head of the ring (replacing any record of the key); false when it is larger
   * than a segment (not kept).
   */
  #write (key: string, entry: CachedAnswer, since: number, expires: number): boolean {
    const tags = JSON.stringify(entry.tags)
    const keyBytes = Buffer.byteLength(key)
    const bodyBytes = Buffer.byteLength(entry.body)
    const tagsBytes = Buffer.byteLength(tags)
    const size = align(HEADER_BYTES + 4 * entry.tags.length + keyBytes + bodyBytes + tagsBytes)
    const block = this.#block ?? this.#allocate()
    const old = this.#find(block, key)
    if (old !== -1) this.#unlink(block, old)
    if (size > this.#segmentBytes) return false
    if (this.#filled[this.#current]! + size > this.#segmentBytes) this.#advance(block)
    const at = this.#segmentStart + this.#current * this.#segmentBytes + this.#filled[this.#current]!
    const hash = hashOf(key)
    const bucket = hash & (this.#buckets!.length - 1)
    block.writeUInt32LE(keyBytes, at + KEY_BYTES)
    block.writeUInt32LE(bodyBytes, at + BODY_BYTES)
    block.writeUInt32LE(tagsBytes, at + TAGS_BYTES)
    block.writeInt32LE(this.#buckets![bucket]!, at + NEXT)
    block.writeUInt32LE(hash, at + HASH)
    block.writeUInt32LE(1, at + LIVE)
    block.writeDoubleLE(since, at + SINCE)
    block.writeDoubleLE(entry.createdAt, at + CREATED_AT)
    block.writeDoubleLE(expires, at + EXPIRES)
    block.writeUInt32LE(entry.tags.length, at + TAG_COUNT)
    block.write(entry.digest, at + DIGEST, 16, 'latin1')
    let cursor = at + HEADER_BYTES
    for (const tag of entry.tags) cursor = block.writeUInt32LE(hashOf(tag), cursor)
    cursor += block.write(key, cursor, 'utf8')
    cursor += block.write(entry.body, cursor, 'utf8')
    block.write(tags, cursor, 'utf8')
    this.#buckets![bucket] = at
    this.#filled[this.#current]! += size
    this.#count++
    this.#bytes += size
    return true
  }

  #allocate (): Buffer {
    // Outside V8's heap, allocated once; the index is a view of its first bytes.
    const block = Buffer.allocUnsafeSlow(this.#segmentStart + this.#segmentBytes * SEGMENTS)
    this.#buckets = new Int32Array(block.buffer, block.byteOffset, this.#segmentStart / 4).fill(-1)
    this.#block = block
    return block
  }

  /** Moves to the next segment of the ring, emptying it of the records it held (the oldest). */
  #advance (block: Buffer): void {
    this.#current = (this.#current + 1) % SEGMENTS
    const start = this.#segmentStart + this.#current * this.#segmentBytes
    const end = start + this.#filled[this.#current]!
    for (let at = start; at < end; at += this.#recordBytes(block, at)) {
      if (block.readUInt32LE(at + LIVE) === 1) this.#unlink(block, at)
    }
    this.#filled[this.#current] = 0
  }

  #recordBytes (block: Buffer, at: number): number {
    return align(HEADER_BYTES + 4 * block.readUInt32LE(at + TAG_COUNT) + block.readUInt32LE(at + KEY_BYTES) +
      block.readUInt32LE(at + BODY_BYTES) + block.readUInt32LE(at + TAGS_BYTES))
  }

  /** Takes a record out of the index (its bytes are reused when its segment comes round). */
  #unlink (block: Buffer, at: number): void {
    const buckets = this.#buckets!
    const bucket = block.readUInt32LE(at + HASH) & (buckets.length - 1)
    const next = block.readInt32LE(at + NEXT)
    if (buckets[bucket] === at) {
      buckets[bucket] = next
    } else {
      let previous = buckets[bucket]!
      while (previous !== -1 && block.readInt32LE(previous + NEXT) !== at) previous = block.readInt32LE(previous + NEXT)
      if (previous !== -1) block.writeInt32LE(next, previous + NEXT)
    }
    block.writeUInt32LE(0, at + LIVE)
    this.#count--
    this.#bytes -= this.#recordBytes(block, at)
  }

  #segmentOf (at: number): number {
    return Math.floor((at - this.#segmentStart) / this.#segmentBytes)
  }

  /** How many segments were written after this one (0: the one being written). */
  #ageOfSegment (segment: number): number {
    return (this.#current - segment + SEGMENTS) % SEGMENTS
  }
}
