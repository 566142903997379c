// The persisted GET's ETag hash: the same answer always gives the same validator, and answers that
// differ (in one character, in where the media type ends) give different ones.
import { test } from 'tap'
import { textHash } from '../../app/core/text-hash.ts'

test('textHash: stable, 16 hex digits, and different for near-identical answers', async (t) => {
  const answer = (id: number, name: string) => `{"data":{"user":{"id":"${id}","name":"${name}","email":"u${id}@example.com"}}}`
  t.equal(textHash('application/json', answer(1, 'Ada')), textHash('application/json', answer(1, 'Ada')))
  t.match(textHash('application/json', answer(1, 'Ada')), /^[0-9a-f]{16}$/)
  const seen = new Set<string>()
  // 100000 answers differing in an id or one character of a name: no two share a hash.
  for (let id = 0; id < 50_000; id++) {
    seen.add(textHash('application/json', answer(id, 'Ada')))
    seen.add(textHash('application/json', answer(id, 'Adb')))
  }
  t.equal(seen.size, 100_000, 'no collision among 100000 near-identical answers')
  t.not(textHash('application/json', answer(1, 'Ada')), textHash('application/graphql-response+json', answer(1, 'Ada')), 'the media type counts')
  t.not(textHash('ab', 'c'), textHash('a', 'bc'), 'where one text ends counts')
})
