// Partner passwords at rest. WS-Security allows two forms and they need different things on the server:
// - PasswordText sends the password itself: a scrypt hash is enough to check it;
// - PasswordDigest sends Base64(SHA-1(nonce + created + password)): the server must know the password
//   in plain to recompute it, so the password is also stored sealed (AES-256-GCM) with a server key
//   (PARTNER_SECRET_KEY). Whoever holds both the database and that key can read partner passwords;
//   that is inherent to PasswordDigest, so keep the key out of the database and rotate partners' passwords
//   if it leaks. The login is bound into the seal (additional data), so a sealed value copied to another
//   account does not open.
import {
  createCipheriv,
  createDecipheriv,
  createHash,
  randomBytes,
  scrypt,
  timingSafeEqual,
  type ScryptOptions
} from 'node:crypto'

const SCRYPT = { N: 16384, r: 8, p: 1, keylen: 32 }

function scryptAsync (password: string, salt: Buffer, keylen: number, options: ScryptOptions): Promise<Buffer> {
  return new Promise((resolve, reject) =>
    scrypt(password, salt, keylen, options, (err, key) => (err ? reject(err) : resolve(key)))
  )
}

/** `scrypt$N$r$p$<salt b64>$<hash b64>`: parameters travel with the hash so they can be raised later. */
export async function hashPassword (password: string): Promise<string> {
  const salt = randomBytes(16)
  const hash = await scryptAsync(password, salt, SCRYPT.keylen, SCRYPT)
  return ['scrypt', SCRYPT.N, SCRYPT.r, SCRYPT.p, salt.toString('base64'), hash.toString('base64')].join('$')
}

export async function verifyPassword (password: string, stored: string): Promise<boolean> {
  const [scheme, n, r, p, salt, hash] = stored.split('$')
  if (scheme !== 'scrypt' || !salt || !hash) return false
  const expected = Buffer.from(hash, 'base64')
  const N = Number(n)
  const actual = await scryptAsync(password, Buffer.from(salt, 'base64'), expected.length, {
    N,
    r: Number(r),
    p: Number(p),
    maxmem: 256 * N * Number(r)
  })
  return timingSafeEqual(actual, expected)
}

function keyOf (serverKey: string): Buffer {
  // The setting is a long random secret (at least 32 characters, checked in config); SHA-256 fits it to 32 bytes.
  return createHash('sha256').update(serverKey).digest()
}

/** `v1$<iv b64>$<tag b64>$<ciphertext b64>` */
export function sealPassword (password: string, login: string, serverKey: string): string {
  const iv = randomBytes(12)
  const cipher = createCipheriv('aes-256-gcm', keyOf(serverKey), iv)
  cipher.setAAD(Buffer.from(login, 'utf8'))
  const sealed = Buffer.concat([cipher.update(password, 'utf8'), cipher.final()])
  return ['v1', iv.toString('base64'), cipher.getAuthTag().toString('base64'), sealed.toString('base64')].join('$')
}

/** The plain password, or null when the value was sealed with another key or for another login. */
export function unsealPassword (sealed: string, login: string, serverKey: string): string | null {
  const [version, iv, tag, data] = sealed.split('$')
  if (version !== 'v1' || !iv || !tag || data === undefined) return null
  try {
    const decipher = createDecipheriv('aes-256-gcm', keyOf(serverKey), Buffer.from(iv, 'base64'))
    decipher.setAAD(Buffer.from(login, 'utf8'))
    decipher.setAuthTag(Buffer.from(tag, 'base64'))
    return Buffer.concat([decipher.update(Buffer.from(data, 'base64')), decipher.final()]).toString('utf8')
  } catch {
    return null
  }
}
