// The bounded map every cache of the service is built on: it forgets the least recently used entries
// beyond its entry and weight bounds, and a use is a use whether or not the key was the last one used.
import { test } from 'tap'
import { LruMap } from '../app/core/lru-map.ts'

const keys = (map: LruMap<string, number>, candidates: string[]) => candidates.filter((k) => map.peek(k) !== undefined)

test('beyond its entry bound it forgets the least recently used', async (t) => {
  const map = new LruMap<string, number>(3)
  map.set('a', 1); map.set('b', 2); map.set('c', 3)
  t.equal(map.get('a'), 1, 'a is now the most recently used')
  t.equal(map.get('a'), 1, 'asked again while already the most recent: still a hit')
  map.set('d', 4)
  t.same(keys(map, ['a', 'b', 'c', 'd']), ['a', 'c', 'd'], 'b, the least recently used, is forgotten')
  t.equal(map.get('c'), 3)
  map.set('e', 5)
  t.same(keys(map, ['a', 'c', 'd', 'e']), ['c', 'd', 'e'], 'a was used before c, d and e')
})

test('the most recent key, once deleted and set again, is ordered as new', async (t) => {
  const map = new LruMap<string, number>(2)
  map.set('a', 1); map.set('b', 2)
  map.delete('b')
  map.set('c', 3)
  t.equal(map.get('a'), 1, 'a moves to the end')
  map.set('b', 4)
  t.same(keys(map, ['a', 'b', 'c']), ['a', 'b'], 'c was the least recently used')
})

test('peek reads without counting as a use; a weight bound forgets the oldest until it holds', async (t) => {
  const map = new LruMap<string, number>(Infinity, 10)
  map.set('a', 1, 4); map.set('b', 2, 4)
  t.equal(map.peek('a'), 1)
  map.set('c', 3, 4)
  t.same(keys(map, ['a', 'b', 'c']), ['b', 'c'], 'a was the oldest: peeking did not keep it')
  t.equal(map.weight, 8)
  map.set('big', 9, 11)
  t.equal(map.peek('big'), undefined, 'heavier than the bound alone: not kept')
  t.equal(map.size, 2)
})
