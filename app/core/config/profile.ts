// The profile every other area's defaults depend on. Always read (load.ts), whatever areas are asked for.
import { area, type Profile } from './area.ts'

/** Production when NODE_ENV says so; anything else is development. */
export function profileOf (nodeEnv: unknown): Profile {
  return nodeEnv === 'production' ? 'production' : 'development'
}

export const profile = area({
  key: 'profile',
  title: 'Profile',
  about: 'Every other area\'s defaults may depend on it: where two defaults are given below, the second is the production profile\'s.',
  settings: {
    NODE_ENV: {
      type: 'string',
      default: 'development',
      doc: '`production` selects the production profile (secrets required; introspection, query UI, demo data and ' +
        'ad-hoc queries off); anything else is development'
    }
  },
  // load.ts decides the profile (profileOf) before any area is read: every `read` is given it.
  read: (_values, { profile }) => profile
})
