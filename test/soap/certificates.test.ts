// The certificate a partner signs with is parsed once (app/core/domain/partners.ts usableCertificate): about
// 140 µs a parse, paid on every signed message before. What a remembered parse must not change: validity
// is judged at each use, and text that is no certificate is refused every time.
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { test } from 'tap'
import { usableCertificate } from '../../app/core/domain/partners.ts'
import { makeCertificate } from './x509.ts'

test('a certificate is parsed once, and judged valid or not at each use', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'certificates-'))
  t.teardown(() => rmSync(dir, { recursive: true, force: true }))
  const { cert } = makeCertificate(dir, 'partner', { days: 2 })
  const now = Date.now()
  const first = usableCertificate(cert, now)
  t.equal(usableCertificate(cert, now), first, 'the same text: the certificate parsed the first time')
  t.equal(usableCertificate(first.raw, now), usableCertificate(first.raw, now), 'the same DER: parsed once too')

  const expiry = Date.parse(first.validTo)
  t.throws(() => usableCertificate(cert, expiry + 1000), /expired/, 'remembered, yet refused once it has expired')
  t.throws(() => usableCertificate(cert, Date.parse(first.validFrom) - 1000), /not valid before/,
    'and before it is valid')
  t.equal(usableCertificate(cert, now), first, 'and still usable now')

  for (let i = 0; i < 2; i++) {
    t.throws(() => usableCertificate('-----BEGIN CERTIFICATE-----\nnope\n-----END CERTIFICATE-----', now),
      /not an X\.509 certificate/, 'text that is no certificate is refused, each time')
  }
})
