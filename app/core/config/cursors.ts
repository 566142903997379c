// Page cursors (GraphQL connections, SOAP page tokens) are signed, so a client cannot forge a position.
import { area, optional } from './area.ts'
import { soap } from './soap.ts'

export const cursors = area({
  key: 'cursors',
  title: 'Page cursors',
  about: 'The key page cursors are signed with; every instance must share it.',
  uses: [soap],
  settings: {
    CURSOR_SECRET: { type: 'string', shownDefault: 'derived from `PARTNER_SECRET_KEY`', doc: 'at least 32 characters, optional: signs page cursors (GraphQL connections, SOAP page tokens); changing it invalidates open cursors only' }
  },
  read: (e, { problems, soap }) => {
    // Cursors need a key every instance shares; PARTNER_SECRET_KEY already is one (required in production),
    // and the key is derived under a label of its own, so no new secret is required. CURSOR_SECRET
    // separates them: rotating it invalidates open cursors only, never partner passwords.
    const secret = optional(e.CURSOR_SECRET)
    if (secret !== null && secret.length < 32) problems.push('CURSOR_SECRET must be at least 32 characters')
    /** What the signing key is derived from: CURSOR_SECRET, else PARTNER_SECRET_KEY (under a label of its own). */
    return { secret: secret ?? soap.partnerSecretKey }
  }
})
