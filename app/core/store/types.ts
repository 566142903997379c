// The one store interface. Both implementations (node:sqlite, PostgreSQL) pass the same test suite.
import { X509Certificate, createHash } from 'node:crypto'
import { AppError } from '../errors.ts'

export type Role = 'USER' | 'ADMIN' | 'SERVICE'
export const ROLES: readonly Role[] = ['USER', 'ADMIN', 'SERVICE']

export interface UserRow {
  id: string
  name: string
  email: string
  adminNotes: string | null
  role: Role
  /** ISO-8601 UTC with milliseconds, e.g. 2026-01-02T03:04:05.678Z */
  createdAt: string
}

export interface MessageRow {
  id: string
  roomId: string
  content: string
  authorId: string
  createdAt: string
}

/** Where a keyset page starts or ends: the (createdAt, id) of a row, the order both stores page in. */
export interface Position {
  createdAt: string
  id: string
}

/** Which way a keyset page reads from its position: `after` it (oldest first) or `before` it (newest first). */
export type Direction = 'after' | 'before'

export interface NewUser {
  id?: string
  name: string
  email: string
  role?: Role
  adminNotes?: string | null
  createdAt?: string
}

export interface UserPatch {
  name?: string
  email?: string
  role?: Role
  adminNotes?: string | null
}

export interface NewMessage {
  roomId: string
  content: string
  authorId: string
  createdAt?: string
}

/** An operation an app deployment ships: stored once, whichever deployments hold it. */
export interface DeployedOperation {
  /** The sha256 hex of `body`: the operation's identity. */
  hash: string
  body: string
  name: string | null
  type: string
  /** The id the app's manifest gave it when not its sha256 (Relay's md5, say): what its clients send. */
  clientId: string | null
  /**
   * What its plan and compiled code weigh in an instance's memory, in bytes, as the service estimates it
   * (plan.ts: measured per character and per field): what DEPLOYMENTS_MAX_BYTES bounds.
   */
  weight: number
}

export type DeploymentState = 'pending' | 'active' | 'retired'

/** An app deployment: an app's name and version, the operations it ships, and what they were used for. */
export interface Deployment {
  name: string
  version: string
  state: DeploymentState
  /** sha256 of its operations' hashes and ids, sorted: the same content publishes as the same. */
  contentHash: string
  operations: number
  /** Requests counted for its operations (on every instance, written in batches). */
  requests: number
  lastUsedAt: string | null
  publishedAt: string
  retiredAt: string | null
}

/** One operation of one deployment, with the deployment's state (what the registry loads). */
export interface DeploymentOperationRow extends DeployedOperation {
  app: string
  version: string
  state: DeploymentState
}

/** An app deployment's name and version. */
export interface DeploymentKey {
  name: string
  version: string
}

/** Requests counted for one operation of one deployment since the last write. */
export interface DeploymentUsage {
  app: string
  version: string
  hash: string
  requests: number
  lastUsedAt: string
}

/** What deleting a user removed with it (the store cascades to their messages). */
export interface DeletedUser {
  /** The rooms the user's messages were deleted from. */
  rooms: string[]
}

/** Told of changes committed by others than this store (Store.watchChanges). */
export interface ChangeListener {
  /**
   * The read tags a commit changed, or 'all' when the store cannot tell which. `position`: where the feed
   * has read up to, everything before it told (PostgreSQL's change log; none for the embedded store).
   */
  changed (tags: readonly string[] | 'all', position?: string): void
  /**
   * Where a feed starting without a position of its own should read from: a position the listener (the
   * shared cache) knows every change before was applied up to; null when it does not know (the feed then
   * reads the window its store keeps).
   */
  resumeFrom? (): Promise<string | null>
  /**
   * Whether changes made elsewhere are seen now. False while the feed is down; when it is back, what it
   * missed is told first (or 'all' when that cannot be known), then true.
   */
  watching (live: boolean): void
}

export interface ChangeWatch {
  stop (): Promise<void>
}

/** A partner's SOAP credentials: a login bound to a user (normally role SERVICE). */
export interface Credentials {
  userId: string
  login: string
  role: Role
  /** scrypt hash of the password, for PasswordText. */
  passwordHash: string | null
  /** The password sealed with the server key, needed to verify PasswordDigest (see routes/soap). */
  passwordSecret: string | null
}

/** A partner account as listed: its login, the user it acts as, and the password styles it can use. */
export interface PartnerAccount {
  login: string
  userId: string
  name: string
  role: Role
  /** A password hash is stored: PasswordText works. */
  passwordText: boolean
  /** A sealed password is stored: PasswordDigest works. */
  passwordDigest: boolean
}

/** An X.509 certificate registered to a partner login (WS-Security signatures); a login has at most two. */
export interface PartnerCertificate {
  /** SHA-256 of the certificate's DER, lowercase hex without separators. */
  fingerprint: string
  /** SHA-1 of the DER, lowercase hex: how a ThumbprintSHA1 key identifier names it (an identifier only). */
  thumbprint: string
  /** issuerSerialKey of its issuer and serial number: how an X509IssuerSerial names it (an identifier only). */
  issuerSerial: string
  login: string
  pem: string
  /** When it was registered (ISO 8601); the newer of two is the current one. */
  addedAt: string
}

/** A registered certificate with the partner it authenticates. */
export interface CertificateCredentials extends PartnerCertificate {
  userId: string
  role: Role
}

export interface Store {
  readonly kind: 'sqlite' | 'postgres'
  usersByIds (ids: readonly string[]): Promise<UserRow[]>
  listUsers (limit: number): Promise<UserRow[]>
  /** Up to `limit` users after `from` in (createdAt, id) order, oldest first; from the start when `from` is null. */
  usersAfter (from: Position | null, limit: number): Promise<UserRow[]>
  /** Throws AppError CONFLICT when the e-mail is taken. */
  createUser (user: NewUser): Promise<UserRow>
  /** Bulk insert for seeding; ignores nothing, fails whole on a conflict. */
  insertUsers (users: readonly NewUser[]): Promise<UserRow[]>
  updateUser (id: string, patch: UserPatch): Promise<UserRow | null>
  /** Deletes the user and their messages; null when no user has the id. */
  deleteUser (id: string): Promise<DeletedUser | null>
  /** The newest `limit` messages of a room, oldest first. */
  messagesByRoom (roomId: string, limit: number): Promise<MessageRow[]>
  /**
   * Up to `limit` messages of a room in (createdAt, id) order from `from` (exclusive; the start or the
   * end when null): `after` reads oldest first, `before` newest first. A message id is an integer.
   */
  messagesPage (roomId: string, direction: Direction, from: Position | null, limit: number): Promise<MessageRow[]>
  createMessage (message: NewMessage): Promise<MessageRow>
  insertMessages (messages: readonly NewMessage[]): Promise<number>
  countUsers (): Promise<number>
  findCredentials (login: string): Promise<Credentials | null>
  setCredentials (
    userId: string,
    login: string,
    passwordHash: string | null,
    passwordSecret: string | null
  ): Promise<void>
  /** Every partner account (a user with a login), by login. */
  listPartners (): Promise<PartnerAccount[]>
  /**
   * Ends a partner account: its login, passwords and certificates are removed, the user stays. False when
   * no user has the login.
   */
  removePartner (login: string): Promise<boolean>
  /** The partner whose login holds the certificate with this SHA-256 fingerprint, or null. */
  findCertificate (fingerprint: string): Promise<CertificateCredentials | null>
  /** The same, found by the certificate's SHA-1 thumbprint. */
  findCertificateByThumbprint (thumbprint: string): Promise<CertificateCredentials | null>
  /** The same, by issuerSerialKey; null as well when two registered certificates share it (a CA's mistake). */
  findCertificateByIssuerSerial (issuerSerial: string): Promise<CertificateCredentials | null>
  /** The certificates of a login, newest first. */
  certificatesOf (login: string): Promise<PartnerCertificate[]>
  /** Replaces the certificates of a login with these (at most two: the current one and the previous one). */
  replaceCertificates (login: string, certificates: readonly PartnerCertificate[]): Promise<void>
  /**
   * Publishes an app deployment with its operations, all or nothing: stored pending, then active.
   * 'unchanged' when that name and version is active with the same content (a no-op); published again
   * when it was retired with the same content; AppError CONFLICT when it is there with other content.
   * `maxWeight`: the active operations' weight (each distinct operation once) may not pass it once this
   * one is active, checked in the publish's own transaction with every publish serialised (AppError
   * BAD_USER_INPUT: deploymentTooHeavy), so two publishes at once cannot both pass it.
   */
  publishDeployment (deployment: {
    name: string
    version: string
    contentHash: string
    operations: readonly DeployedOperation[]
    maxWeight: number
  }): Promise<'published' | 'unchanged'>
  /** Retires an active deployment; false when no deployment has that name and version. */
  retireDeployment (name: string, version: string): Promise<boolean>
  /** Every deployment, newest first, with its usage. */
  listDeployments (): Promise<Deployment[]>
  /**
   * The operations of the deployments that are not pending (active ones to serve, retired ones to name),
   * all of them or those of `of`. A retired one's body is read as '' (naming it needs only its ids).
   */
  deploymentOperations (of?: readonly DeploymentKey[]): Promise<DeploymentOperationRow[]>
  /**
   * Records that instance `instance` runs, now, the service profile `hash` (its schema and limits, as JSON
   * `profile`): what publishes are checked against. Instances not seen for a day are forgotten.
   */
  recordServiceInstance (instance: string, hash: string, profile: string): Promise<void>
  /** Forgets an instance (it stopped). */
  forgetServiceInstance (instance: string): Promise<void>
  /** The profiles of the instances seen in the last `withinMs`, with how many run each, the latest seen first. */
  serviceProfiles (withinMs: number): Promise<{ hash: string; profile: string; instances: number; seenAt: string }[]>
  /** Adds counted requests (and the latest use) to deployments' operations. */
  recordUsage (usage: readonly DeploymentUsage[]): Promise<void>
  /**
   * Reports commits this store did not make itself (another process: `npm run partner:create`, a
   * migration, an operator's SQL) until stopped. See ChangeListener.
   */
  watchChanges (listener: ChangeListener): ChangeWatch
  /** Resolves when the store answers a trivial query. */
  ping (): Promise<void>
  close (): Promise<void>
}

/** A name and version published again with other content: a new version must be a new version. */
export function deploymentConflict (name: string, version: string): AppError {
  return new AppError('CONFLICT', `App deployment ${name} ${version} is published already with other operations: publish a new version`)
}

export function deploymentTooHeavy (name: string, version: string, weight: number, maxWeight: number): AppError {
  return new AppError('BAD_USER_INPUT',
    `App deployment ${name} ${version} not published: the active operations would weigh ${weight} bytes in memory, ` +
    `over DEPLOYMENTS_MAX_BYTES (${maxWeight}); retire versions no longer in use first`,
    { weight, maxWeight })
}

export function isoNow (): string {
  return new Date().toISOString()
}

/**
 * How an X509IssuerSerial names a certificate, as stored: SHA-256 (hex) of the issuer's attributes
 * ("CN=bank", "O=Bank"; sorted, since an X509IssuerName lists them most specific first and a certificate
 * least) and the serial number.
 */
export function issuerSerialKey (issuerAttributes: readonly string[], serial: bigint): string {
  const issuer = issuerAttributes.map((a) => a.trim().replace(/\s*=\s*/, '=')).filter((a) => a !== '').sort()
  return createHash('sha256').update(`${issuer.join('\n')}\n#${serial}`).digest('hex')
}

/** The issuerSerialKey of a certificate (PEM or DER). */
export function certificateIssuerSerial (certificate: string | Buffer): string {
  const { issuer, serialNumber } = new X509Certificate(certificate)
  return issuerSerialKey(issuer.split('\n'), BigInt(`0x${serialNumber}`))
}

/**
 * The issuerSerialKey of each certificate a store holds without one (rows stored before the key
 * existed), for the store to save; a PEM that does not read as a certificate keeps none.
 */
export function missingIssuerSerials (rows: ReadonlyArray<{ fingerprint: string; pem: string }>) {
  return rows.flatMap(({ fingerprint, pem }) => {
    try {
      return [{ fingerprint, issuerSerial: certificateIssuerSerial(pem) }]
    } catch {
      return []
    }
  })
}
