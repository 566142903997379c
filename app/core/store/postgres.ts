// PostgreSQL store through `pg`. Migrations run at start under an advisory lock, so several instances
// starting at once migrate exactly once. Every read is one round trip with a named (prepared) statement.
import pg from 'pg'
import { randomUUID } from 'node:crypto'
import { AppError } from '../errors.ts'
import { followChangeLog } from './postgres-changes.ts'
import { sharedChanges } from './shared-changes.ts'
import { tableTags } from '../domain/read-tags.ts'
import { deploymentConflict, deploymentTooHeavy, isoNow, missingIssuerSerials, type CertificateCredentials, type Deployment, type DeploymentOperationRow, type Credentials, type PartnerAccount, type PartnerCertificate, type MessageRow, type NewMessage, type NewUser, type Store, type UserPatch, type UserRow } from './types.ts'

/**
 * The statement triggers that log a table's changes through log_row_changes(`args`), one per kind of
 * statement (each sees the transition tables it has), enabled ALWAYS: writes made with
 * session_replication_role = replica (pg_restore, logical replication) are logged too.
 */
function changeLogTriggers (table: keyof typeof tableTags): string {
  const { prefix, column, table: tableTag, everyChange } = tableTags[table]
  const args = [prefix, column, tableTag, ...(everyChange ? [everyChange] : [])].map((arg) => `'${arg}'`).join(', ')
  const kinds = [
    ['INSERT', 'REFERENCING NEW TABLE AS new_rows'],
    ['UPDATE', 'REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows'],
    ['DELETE', 'REFERENCING OLD TABLE AS old_rows'],
    ['TRUNCATE', '']
  ]
  const name = (kind: string) => `${table}_log_${kind.toLowerCase()}s`
  return kinds.map(([kind, transitions]) =>
    `CREATE TRIGGER ${name(kind!)} AFTER ${kind} ON ${table} ${transitions} FOR EACH STATEMENT EXECUTE FUNCTION log_row_changes(${args});`
  ).join('\n') + `\nALTER TABLE ${table} ${kinds.map(([kind]) => `ENABLE ALWAYS TRIGGER ${name(kind!)}`).join(', ')};`
}

/** The schema's migrations, in order: version N is MIGRATIONS[N - 1]. */
export const MIGRATIONS: string[] = [
  `CREATE TABLE users (
     id TEXT PRIMARY KEY,
     name TEXT NOT NULL,
     email TEXT NOT NULL UNIQUE,
     admin_notes TEXT,
     role TEXT NOT NULL DEFAULT 'USER' CHECK (role IN ('USER', 'ADMIN', 'SERVICE')),
     created_at TIMESTAMPTZ NOT NULL,
     login TEXT UNIQUE,
     password_hash TEXT,
     password_secret TEXT
   );
   CREATE INDEX users_created_at ON users (created_at, id);
   CREATE TABLE messages (
     id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
     room_id TEXT NOT NULL,
     content TEXT NOT NULL,
     author_id TEXT NOT NULL REFERENCES users (id) ON DELETE CASCADE,
     created_at TIMESTAMPTZ NOT NULL
   );
   CREATE INDEX messages_room ON messages (room_id, id);
   CREATE INDEX messages_author ON messages (author_id);`,
  // Keyset pages: user ids compare bytewise (COLLATE "C", as sqlite compares them), whatever the
  // database's collation, so both stores page in the same order; a room's messages by (created_at, id).
  // Each page is one index range, whatever the table's size.
  `CREATE INDEX users_keyset ON users (created_at, id COLLATE "C");
   CREATE INDEX messages_room_created ON messages (room_id, created_at, id);`,
  // WS-Security X.509 signatures: a partner login's registered certificates, found by fingerprint.
  `CREATE TABLE partner_certificates (
     fingerprint TEXT PRIMARY KEY,
     thumbprint TEXT NOT NULL UNIQUE,
     login TEXT NOT NULL REFERENCES users (login) ON UPDATE CASCADE ON DELETE CASCADE,
     pem TEXT NOT NULL,
     added_at TIMESTAMPTZ NOT NULL
   );
   CREATE INDEX partner_certificates_login ON partner_certificates (login, added_at);`,
  // An X509IssuerSerial key reference (WSS4J's default) finds a certificate by its issuer and serial
  // number; rows registered before get theirs in migrate().
  `ALTER TABLE partner_certificates ADD COLUMN issuer_serial TEXT;
   CREATE INDEX partner_certificates_issuer_serial ON partner_certificates (issuer_serial);`,
  // Changes made beside the service (an operator's SQL, a migration, the command-line tools) reach every
  // instance's response cache: each changed row publishes the read tags it changes (app/core/domain/read-tags.ts
  // names them: user:<id>, users, room:<id>) on the schema's channel, which instances LISTEN to
  // (watchChanges). The service's own connections set graphql_service.own_writes: their writes told the
  // caches themselves before they were acknowledged, and a commit that notifies takes a global lock.
  // PostgreSQL delivers one notification per distinct payload per transaction.
  `CREATE FUNCTION publish_answer_changes () RETURNS trigger LANGUAGE plpgsql AS $$
   DECLARE
     channel text := 'answer_changes_' || TG_TABLE_SCHEMA;
   BEGIN
     IF current_setting('graphql_service.own_writes', true) = 'on' THEN RETURN NULL; END IF;
     IF TG_TABLE_NAME = 'users' THEN
       PERFORM pg_notify(channel, 'users');
       IF TG_OP <> 'INSERT' THEN PERFORM pg_notify(channel, 'user:' || OLD.id); END IF;
       IF TG_OP <> 'DELETE' THEN PERFORM pg_notify(channel, 'user:' || NEW.id); END IF;
     ELSE
       IF TG_OP <> 'INSERT' THEN PERFORM pg_notify(channel, 'room:' || OLD.room_id); END IF;
       IF TG_OP <> 'DELETE' THEN PERFORM pg_notify(channel, 'room:' || NEW.room_id); END IF;
     END IF;
     RETURN NULL;
   END $$;
   CREATE TRIGGER users_publish_changes AFTER INSERT OR UPDATE OR DELETE ON users
     FOR EACH ROW EXECUTE FUNCTION publish_answer_changes();
   CREATE TRIGGER messages_publish_changes AFTER INSERT OR UPDATE OR DELETE ON messages
     FOR EACH ROW EXECUTE FUNCTION publish_answer_changes();
   CREATE FUNCTION publish_all_answers_changed () RETURNS trigger LANGUAGE plpgsql AS $$
   BEGIN
     IF current_setting('graphql_service.own_writes', true) = 'on' THEN RETURN NULL; END IF;
     PERFORM pg_notify('answer_changes_' || TG_TABLE_SCHEMA, '*');
     RETURN NULL;
   END $$;
   CREATE TRIGGER users_truncate_publishes AFTER TRUNCATE ON users
     FOR EACH STATEMENT EXECUTE FUNCTION publish_all_answers_changed();
   CREATE TRIGGER messages_truncate_publishes AFTER TRUNCATE ON messages
     FOR EACH STATEMENT EXECUTE FUNCTION publish_all_answers_changed();`,
  // App deployments: an app's name and version with the persisted operations it ships (stored once
  // whichever versions share them), and their usage. Every change to a deployment is published as
  // 'deployments' on the schema's channel, the instances' own included: each instance reloads the
  // operations it serves from it (app/graphql/deployment-catalog.ts).
  `CREATE TABLE persisted_operations (
     hash TEXT PRIMARY KEY,
     body TEXT NOT NULL,
     name TEXT,
     type TEXT NOT NULL
   );
   CREATE TABLE app_deployments (
     name TEXT NOT NULL,
     version TEXT NOT NULL,
     state TEXT NOT NULL CHECK (state IN ('pending', 'active', 'retired')),
     content_hash TEXT NOT NULL,
     published_at TIMESTAMPTZ NOT NULL,
     retired_at TIMESTAMPTZ,
     PRIMARY KEY (name, version)
   );
   CREATE TABLE app_deployment_operations (
     name TEXT NOT NULL,
     version TEXT NOT NULL,
     hash TEXT NOT NULL REFERENCES persisted_operations (hash),
     client_id TEXT,
     requests BIGINT NOT NULL DEFAULT 0,
     last_used_at TIMESTAMPTZ,
     PRIMARY KEY (name, version, hash),
     FOREIGN KEY (name, version) REFERENCES app_deployments (name, version)
   );
   CREATE FUNCTION publish_deployments_changed () RETURNS trigger LANGUAGE plpgsql AS $$
   BEGIN
     PERFORM pg_notify('answer_changes_' || TG_TABLE_SCHEMA, 'deployments');
     RETURN NULL;
   END $$;
   CREATE TRIGGER app_deployments_publish_changes AFTER INSERT OR UPDATE OR DELETE ON app_deployments
     FOR EACH STATEMENT EXECUTE FUNCTION publish_deployments_changed();`,
  // The change log (postgres-changes.ts reads it): what a statement changed, as read tags, kept where an
  // instance can read it again after a gap (a restart, a lost or silent connection), with its transaction
  // id to catch up by. A NOTIFY on the schema's channel only rings the bell. One row per statement
  // (transition tables), so a bulk change is one row, and one naming its table (`table:users`) past 1000
  // tags. The triggers fire ALWAYS: also under session_replication_role = replica (logical replication,
  // pg_restore's data-only loads, bulk loaders). The service's own writes log nothing (they told the
  // caches before they were acknowledged) but app deployment changes, which every instance reloads from.
  // The functions keep the migration's search_path, so a write made under any search_path is logged.
  `DROP TRIGGER users_publish_changes ON users;
   DROP TRIGGER messages_publish_changes ON messages;
   DROP TRIGGER users_truncate_publishes ON users;
   DROP TRIGGER messages_truncate_publishes ON messages;
   DROP TRIGGER app_deployments_publish_changes ON app_deployments;
   DROP FUNCTION publish_answer_changes ();
   DROP FUNCTION publish_all_answers_changed ();
   DROP FUNCTION publish_deployments_changed ();
   CREATE TABLE change_log (
     id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
     xid xid8 NOT NULL DEFAULT pg_current_xact_id(),
     at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp(),
     tags TEXT[] NOT NULL
   );
   CREATE INDEX change_log_xid ON change_log (xid);
   CREATE INDEX change_log_at ON change_log (at);
   CREATE TABLE change_log_pruned (up_to xid8 NOT NULL);
   INSERT INTO change_log_pruned VALUES ('0');
   CREATE FUNCTION log_change (schema text, tags text[], table_tag text) RETURNS void LANGUAGE plpgsql
   SET search_path FROM CURRENT AS $$
   BEGIN
     IF tags IS NULL OR cardinality(tags) = 0 THEN RETURN; END IF;
     IF cardinality(tags) > 1000 THEN tags := ARRAY[table_tag]; END IF;
     INSERT INTO change_log (tags) VALUES (tags);
     PERFORM pg_notify('store_changes_' || schema, '');
   END $$;
   -- Each changed row's tag (TG_ARGV[0] || its column TG_ARGV[1]), its table's tag (TG_ARGV[2]) for a
   -- TRUNCATE or past 1000 tags, and a tag every such change carries (TG_ARGV[3], if given).
   CREATE FUNCTION log_row_changes () RETURNS trigger LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
   DECLARE
     tag text := format('%L || %I', TG_ARGV[0], TG_ARGV[1]);
     tags text[];
   BEGIN
     IF current_setting('graphql_service.own_writes', true) = 'on' THEN RETURN NULL; END IF;
     IF TG_OP = 'TRUNCATE' THEN
       tags := ARRAY[TG_ARGV[2]];
     ELSIF TG_OP = 'INSERT' THEN
       EXECUTE format('SELECT array_agg(DISTINCT %s) FROM new_rows', tag) INTO tags;
     ELSIF TG_OP = 'DELETE' THEN
       EXECUTE format('SELECT array_agg(DISTINCT %s) FROM old_rows', tag) INTO tags;
     ELSE
       EXECUTE format('SELECT array_agg(t) FROM (SELECT %s AS t FROM old_rows UNION SELECT %s FROM new_rows) AS changed', tag, tag)
         INTO tags;
     END IF;
     IF tags IS NOT NULL AND TG_NARGS > 3 THEN tags := tags || TG_ARGV[3]; END IF;
     PERFORM log_change(TG_TABLE_SCHEMA, tags, TG_ARGV[2]);
     RETURN NULL;
   END $$;
   CREATE FUNCTION log_deployment_changes () RETURNS trigger LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
   BEGIN
     PERFORM log_change(TG_TABLE_SCHEMA, ARRAY['deployments'], 'deployments');
     RETURN NULL;
   END $$;
   ${changeLogTriggers('users')}
   ${changeLogTriggers('messages')}
   CREATE TRIGGER app_deployments_log_changes AFTER INSERT OR UPDATE OR DELETE ON app_deployments
     FOR EACH STATEMENT EXECUTE FUNCTION log_deployment_changes();
   ALTER TABLE app_deployments ENABLE ALWAYS TRIGGER app_deployments_log_changes;`,
  // What each operation weighs in an instance's memory (its plan and compiled code, as the publisher
  // estimated it): DEPLOYMENTS_MAX_BYTES bounds the active operations' sum, checked as they are published.
  // Operations published before get an estimate above plan.ts's upper ends for most texts.
  `ALTER TABLE persisted_operations ADD COLUMN weight BIGINT;
   UPDATE persisted_operations SET weight = octet_length(body) * 160 + 4096;
   ALTER TABLE persisted_operations ALTER COLUMN weight SET NOT NULL;
   CREATE TABLE service_instances (
     instance TEXT PRIMARY KEY,
     hash TEXT NOT NULL,
     profile TEXT NOT NULL,
     seen_at TIMESTAMPTZ NOT NULL
   );`
]

// Arbitrary constants: the advisory locks that serialise migrations, and app deployment publishes, across instances.
const MIGRATION_LOCK = 727_001
const PUBLISH_LOCK = 727_002

// A retired deployment's bodies are not read: naming its operations needs only their ids.
const DEPLOYMENT_OPERATION_COLUMNS = `d.name AS app, d.version, d.state,
    p.hash, CASE WHEN d.state = 'active' THEN p.body ELSE '' END AS body, p.name, p.type, p.weight::float8 AS weight,
    o.client_id AS "clientId" FROM app_deployments d
    JOIN app_deployment_operations o ON o.name = d.name AND o.version = d.version
    JOIN persisted_operations p ON p.hash = o.hash`
const ISO = (column: string) => `to_char(${column} AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')`
const USER_COLUMNS = `id, name, email, admin_notes AS "adminNotes", role, ${ISO('created_at')} AS "createdAt"`
const CERTIFICATE_COLUMNS = 'c.fingerprint, c.thumbprint, c.issuer_serial AS "issuerSerial", c.login, c.pem, ' +
  `${ISO('c.added_at')} AS "addedAt", ` +
  'u.id AS "userId", u.role FROM partner_certificates c JOIN users u ON u.login = c.login'
const MESSAGE_COLUMNS = `id::text AS id, room_id AS "roomId", content, author_id AS "authorId", ${ISO('created_at')} AS "createdAt"`

function isUniqueViolation (err: unknown): boolean {
  return typeof err === 'object' && err !== null && (err as { code?: string; constraint?: string }).code === '23505' &&
    (err as { constraint?: string }).constraint === 'users_email_key'
}

function query (name: string, text: string) {
  return (values: unknown[]) => ({ name, text, values })
}

const q = {
  usersByIds: query('users_by_ids', `SELECT ${USER_COLUMNS} FROM users WHERE id = ANY($1::text[])`),
  listUsers: query('list_users', `SELECT ${USER_COLUMNS} FROM users ORDER BY created_at, id LIMIT $1`),
  usersFirst: query('users_first', `SELECT ${USER_COLUMNS} FROM users ORDER BY created_at, id COLLATE "C" LIMIT $1`),
  usersAfter: query('users_after', `SELECT ${USER_COLUMNS} FROM users WHERE (created_at, id COLLATE "C") > ($1::timestamptz, $2::text COLLATE "C") ORDER BY created_at, id COLLATE "C" LIMIT $3`),
  // Message columns are qualified in ORDER BY: the output column `id` is the id as text ("10" before "9").
  messagesFirst: query('messages_first', `SELECT ${MESSAGE_COLUMNS} FROM messages WHERE room_id = $1 ORDER BY messages.created_at, messages.id LIMIT $2`),
  messagesAfter: query('messages_after', `SELECT ${MESSAGE_COLUMNS} FROM messages WHERE room_id = $1 AND (created_at, id) > ($2::timestamptz, $3::bigint) ORDER BY messages.created_at, messages.id LIMIT $4`),
  messagesLast: query('messages_last', `SELECT ${MESSAGE_COLUMNS} FROM messages WHERE room_id = $1 ORDER BY messages.created_at DESC, messages.id DESC LIMIT $2`),
  messagesBefore: query('messages_before', `SELECT ${MESSAGE_COLUMNS} FROM messages WHERE room_id = $1 AND (created_at, id) < ($2::timestamptz, $3::bigint) ORDER BY messages.created_at DESC, messages.id DESC LIMIT $4`),
  insertUser: query('insert_user', `INSERT INTO users (id, name, email, role, admin_notes, created_at) VALUES ($1, $2, $3, $4, $5, $6) RETURNING ${USER_COLUMNS}`),
  // The rooms are read in the same statement's snapshot as the delete that cascades to their messages.
  deleteUser: query('delete_user', `WITH rooms AS (SELECT DISTINCT room_id FROM messages WHERE author_id = $1),
    gone AS (DELETE FROM users WHERE id = $1 RETURNING id)
    SELECT EXISTS (SELECT 1 FROM gone) AS deleted, ARRAY(SELECT room_id FROM rooms) AS rooms`),
  messagesByRoom: query('messages_by_room', `SELECT ${MESSAGE_COLUMNS} FROM (SELECT * FROM messages WHERE room_id = $1 ORDER BY id DESC LIMIT $2) AS messages ORDER BY messages.id`),
  insertMessage: query('insert_message', `INSERT INTO messages (room_id, content, author_id, created_at) VALUES ($1, $2, $3, $4) RETURNING ${MESSAGE_COLUMNS}`),
  countUsers: query('count_users', 'SELECT COUNT(*)::int AS n FROM users'),
  findCredentials: query('find_credentials', 'SELECT id AS "userId", login, role, password_hash AS "passwordHash", password_secret AS "passwordSecret" FROM users WHERE login = $1'),
  setCredentials: query('set_credentials', 'UPDATE users SET login = $1, password_hash = $2, password_secret = $3 WHERE id = $4'),
  listPartners: query('list_partners', 'SELECT login, id AS "userId", name, role, password_hash IS NOT NULL AS "passwordText", ' +
    'password_secret IS NOT NULL AS "passwordDigest" FROM users WHERE login IS NOT NULL ORDER BY login'),
  findCertificate: query('find_certificate', `SELECT ${CERTIFICATE_COLUMNS} WHERE c.fingerprint = $1`),
  findCertificateByThumbprint: query('find_certificate_by_thumbprint',
    `SELECT ${CERTIFICATE_COLUMNS} WHERE c.thumbprint = $1`),
  findCertificateByIssuerSerial: query('find_certificate_by_issuer_serial',
    `SELECT ${CERTIFICATE_COLUMNS} WHERE c.issuer_serial = $1 LIMIT 2`),
  findDeployment: query('find_deployment', 'SELECT state, content_hash AS "contentHash" FROM app_deployments WHERE name = $1 AND version = $2 FOR UPDATE'),
  listDeployments: query('list_deployments', `SELECT d.name, d.version, d.state, d.content_hash AS "contentHash",
    ${ISO('d.published_at')} AS "publishedAt", ${ISO('d.retired_at')} AS "retiredAt", COUNT(o.hash)::int AS operations,
    COALESCE(SUM(o.requests), 0)::bigint AS requests, ${ISO('MAX(o.last_used_at)')} AS "lastUsedAt"
    FROM app_deployments d LEFT JOIN app_deployment_operations o ON o.name = d.name AND o.version = d.version
    GROUP BY d.name, d.version ORDER BY d.published_at DESC, d.name, d.version`),
  deploymentOperations: query('deployment_operations', `SELECT ${DEPLOYMENT_OPERATION_COLUMNS} WHERE d.state <> 'pending'`),
  deploymentOperationsOf: query('deployment_operations_of', `SELECT ${DEPLOYMENT_OPERATION_COLUMNS}
    WHERE d.state <> 'pending' AND (d.name, d.version) IN (SELECT * FROM unnest($1::text[], $2::text[]))`),
  // Every distinct operation of the active deployments and of the one being published, once.
  activeWeightWith: query('active_weight_with', `SELECT COALESCE(SUM(p.weight), 0)::bigint AS weight FROM persisted_operations p
    WHERE p.hash IN (SELECT o.hash FROM app_deployment_operations o JOIN app_deployments d ON d.name = o.name AND d.version = o.version
      WHERE d.state = 'active' OR (d.name = $1 AND d.version = $2))`),
  certificatesOf: query('certificates_of', 'SELECT fingerprint, thumbprint, issuer_serial AS "issuerSerial", login, pem, ' +
    `${ISO('added_at')} AS "addedAt" ` +
    'FROM partner_certificates WHERE login = $1 ORDER BY added_at DESC, fingerprint')
}

export interface PostgresOptions {
  url: string
  poolSize: number
  /** A schema of its own (created if missing), e.g. one per test file; default: the connection's search_path. */
  schema?: string | null
  /** Shown in pg_stat_activity, so operators (and the cluster fault test) can find this service's connections. */
  applicationName?: string
  /**
   * The service's own store: its writes publish no changes (it tells the caches itself, before they are
   * acknowledged). Command-line tools leave it off, so the running instances hear of their writes.
   */
  ownWrites?: boolean
  /** How long the change log keeps its rows, and how far back a start reads it (postgres-changes.ts). */
  changesKeepMs?: number
}

/** The change log's default keep: ten minutes (longer than the response cache's default TTL, a minute). */
export const CHANGES_KEEP_MS = 600_000

export async function openPostgresStore (options: PostgresOptions): Promise<Store> {
  const { url, poolSize, schema, applicationName, ownWrites, changesKeepMs = CHANGES_KEEP_MS } = options
  if (schema && !/^[a-z_][a-z0-9_]*$/.test(schema)) throw new Error(`Invalid PostgreSQL schema name: ${schema}`)
  const settings = [
    ...(schema ? [`-c search_path=${schema}`] : []),
    ...(ownWrites ? ['-c graphql_service.own_writes=on'] : [])
  ]
  const connection = {
    connectionString: url,
    connectionTimeoutMillis: 5000,
    ...(applicationName ? { application_name: applicationName } : {}),
    ...(settings.length > 0 ? { options: settings.join(' ') } : {})
  }
  const pool = new pg.Pool({ ...connection, max: poolSize })
  // An idle client that loses its connection (server restart, pg_terminate_backend) must not crash the process.
  pool.on('error', () => {})
  await migrate(pool, schema ?? null)

  const insertUser = async (client: pg.Pool | pg.PoolClient, u: NewUser): Promise<UserRow> => {
    try {
      const { rows } = await client.query<UserRow>(
        q.insertUser([
          u.id ?? randomUUID(),
          u.name,
          u.email,
          u.role ?? 'USER',
          u.adminNotes ?? null,
          u.createdAt ?? isoNow()
        ])
      )
      return rows[0]!
    } catch (err) {
      if (isUniqueViolation(err)) throw new AppError('CONFLICT', 'Email already in use')
      throw err
    }
  }

  const transaction = async <T>(fn: (client: pg.PoolClient) => Promise<T>): Promise<T> => {
    const client = await pool.connect()
    try {
      await client.query('BEGIN')
      const result = await fn(client)
      await client.query('COMMIT')
      return result
    } catch (err) {
      await client.query('ROLLBACK').catch(() => {})
      throw err
    } finally {
      client.release()
    }
  }

  return reportingOutages({
    kind: 'postgres',
    async usersByIds (ids) {
      return (await pool.query<UserRow>(q.usersByIds([ids]))).rows
    },
    async listUsers (limit) {
      return (await pool.query<UserRow>(q.listUsers([limit]))).rows
    },
    async usersAfter (from, limit) {
      return (await pool.query<UserRow>(from ? q.usersAfter([from.createdAt, from.id, limit]) : q.usersFirst([limit])))
        .rows
    },
    createUser: (user) => insertUser(pool, user),
    insertUsers: (users) => transaction(async (client) => {
      const rows: UserRow[] = []
      for (const u of users) rows.push(await insertUser(client, u))
      return rows
    }),
    async updateUser (id, patch: UserPatch) {
      const sets: string[] = []
      const values: unknown[] = []
      const columns = { name: 'name', email: 'email', role: 'role', adminNotes: 'admin_notes' } as const
      for (const key of Object.keys(columns) as (keyof typeof columns)[]) {
        if (patch[key] !== undefined) {
          values.push(patch[key] ?? null)
          sets.push(`${columns[key]} = $${values.length}`)
        }
      }
      if (sets.length === 0) return (await pool.query<UserRow>(q.usersByIds([[id]]))).rows[0] ?? null
      values.push(id)
      try {
        const { rows } = await pool.query<UserRow>(
          `UPDATE users SET ${sets.join(', ')} WHERE id = $${values.length} RETURNING ${USER_COLUMNS}`,
          values
        )
        return rows[0] ?? null
      } catch (err) {
        if (isUniqueViolation(err)) throw new AppError('CONFLICT', 'Email already in use')
        throw err
      }
    },
    async deleteUser (id) {
      const row = (await pool.query<{ deleted: boolean; rooms: string[] }>(q.deleteUser([id]))).rows[0]!
      return row.deleted ? { rooms: row.rooms } : null
    },
    async messagesByRoom (roomId, limit) {
      return (await pool.query<MessageRow>(q.messagesByRoom([roomId, limit]))).rows
    },
    async messagesPage (roomId, direction, from, limit) {
      const text = direction === 'after'
        ? (from ? q.messagesAfter([roomId, from.createdAt, from.id, limit]) : q.messagesFirst([roomId, limit]))
        : (from ? q.messagesBefore([roomId, from.createdAt, from.id, limit]) : q.messagesLast([roomId, limit]))
      return (await pool.query<MessageRow>(text)).rows
    },
    async createMessage (m: NewMessage) {
      return (await pool.query<MessageRow>(q.insertMessage([m.roomId, m.content, m.authorId, m.createdAt ?? isoNow()])))
        .rows[0]!
    },
    insertMessages: (messages) => transaction(async (client) => {
      // One multi-row INSERT per chunk keeps seeding 50000 messages to a few round trips.
      for (let start = 0; start < messages.length; start += 1000) {
        const chunk = messages.slice(start, start + 1000)
        const values: unknown[] = []
        const tuples = chunk.map((m) => {
          values.push(m.roomId, m.content, m.authorId, m.createdAt ?? isoNow())
          const n = values.length
          return `($${n - 3}, $${n - 2}, $${n - 1}, $${n})`
        })
        await client.query(
          `INSERT INTO messages (room_id, content, author_id, created_at) VALUES ${tuples.join(', ')}`,
          values
        )
      }
      return messages.length
    }),
    async countUsers () {
      return (await pool.query<{ n: number }>(q.countUsers([]))).rows[0]!.n
    },
    async findCredentials (login) {
      return (await pool.query<Credentials>(q.findCredentials([login]))).rows[0] ?? null
    },
    async setCredentials (userId, login, passwordHash, passwordSecret) {
      await pool.query(q.setCredentials([login, passwordHash, passwordSecret, userId]))
    },
    async findCertificate (fingerprint) {
      return (await pool.query<CertificateCredentials>(q.findCertificate([fingerprint]))).rows[0] ?? null
    },
    async findCertificateByThumbprint (thumbprint) {
      return (await pool.query<CertificateCredentials>(q.findCertificateByThumbprint([thumbprint]))).rows[0] ?? null
    },
    async findCertificateByIssuerSerial (issuerSerial) {
      const { rows } = await pool.query<CertificateCredentials>(q.findCertificateByIssuerSerial([issuerSerial]))
      return rows.length === 1 ? rows[0]! : null
    },
    async certificatesOf (login) {
      return (await pool.query<PartnerCertificate>(q.certificatesOf([login]))).rows
    },
    async listPartners () {
      return (await pool.query<PartnerAccount>(q.listPartners([]))).rows
    },
    removePartner: (login) => transaction(async (client) => {
      await client.query('DELETE FROM partner_certificates WHERE login = $1', [login])
      const { rowCount } = await client.query(
        'UPDATE users SET login = NULL, password_hash = NULL, password_secret = NULL WHERE login = $1', [login])
      return (rowCount ?? 0) > 0
    }),
    replaceCertificates: (login, certificates) => transaction(async (client) => {
      await client.query('DELETE FROM partner_certificates WHERE login = $1', [login])
      for (const c of certificates) {
        await client.query(
          'INSERT INTO partner_certificates (fingerprint, thumbprint, issuer_serial, login, pem, added_at) ' +
          'VALUES ($1, $2, $3, $4, $5, $6)',
          [c.fingerprint, c.thumbprint, c.issuerSerial, login, c.pem, c.addedAt])
      }
    }),
    publishDeployment: ({ name, version, contentHash, operations, maxWeight }) => transaction(async (client) => {
      // Publishes one at a time, fleet-wide: each sees the others' operations when it checks the bound.
      await client.query('SELECT pg_advisory_xact_lock($1)', [PUBLISH_LOCK])
      const found = await client.query<{ state: string; contentHash: string }>(q.findDeployment([name, version]))
      const known = found.rows[0]
      if (known) {
        if (known.contentHash !== contentHash) throw deploymentConflict(name, version)
        if (known.state !== 'retired') return 'unchanged' as const
      } else {
        await client.query("INSERT INTO app_deployments (name, version, state, content_hash, published_at) VALUES ($1, $2, 'pending', $3, now())",
          [name, version, contentHash])
        // Two statements for the whole manifest, whatever its size.
        await client.query(`INSERT INTO persisted_operations (hash, body, name, type, weight)
          SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::bigint[]) ON CONFLICT (hash) DO NOTHING`,
        [operations.map((op) => op.hash), operations.map((op) => op.body), operations.map((op) => op.name),
          operations.map((op) => op.type), operations.map((op) => Math.ceil(op.weight))])
        await client.query(`INSERT INTO app_deployment_operations (name, version, hash, client_id)
          SELECT $1, $2, u.hash, u.client_id FROM unnest($3::text[], $4::text[]) AS u(hash, client_id)`,
        [name, version, operations.map((op) => op.hash), operations.map((op) => op.clientId)])
      }
      const { rows } = await client.query<{ weight: string }>(q.activeWeightWith([name, version]))
      const weight = Number(rows[0]!.weight)
      if (weight > maxWeight) throw deploymentTooHeavy(name, version, weight, maxWeight)
      // New, or the same content published again after its retirement (a retirement undone): in service.
      await client.query("UPDATE app_deployments SET state = 'active', retired_at = NULL WHERE name = $1 AND version = $2", [name, version])
      return 'published' as const
    }),
    async retireDeployment (name, version) {
      const { rowCount } = await pool.query(
        "UPDATE app_deployments SET state = 'retired', retired_at = COALESCE(retired_at, now()) WHERE name = $1 AND version = $2",
        [name, version])
      return (rowCount ?? 0) > 0
    },
    async listDeployments () {
      return (await pool.query<Deployment & { requests: string }>(q.listDeployments([]))).rows
        .map((row) => ({ ...row, requests: Number(row.requests) }))
    },
    async deploymentOperations (of) {
      if (!of) return (await pool.query<DeploymentOperationRow>(q.deploymentOperations([]))).rows
      if (of.length === 0) return []
      return (await pool.query<DeploymentOperationRow>(
        q.deploymentOperationsOf([of.map((d) => d.name), of.map((d) => d.version)]))).rows
    },
    async recordUsage (usage) {
      if (usage.length === 0) return
      // One statement for the batch, whatever its size.
      await pool.query(
        `UPDATE app_deployment_operations o SET requests = o.requests + u.requests,
           last_used_at = GREATEST(o.last_used_at, u.last_used_at)
         FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[], $5::timestamptz[]) AS u(name, version, hash, requests, last_used_at)
         WHERE o.name = u.name AND o.version = u.version AND o.hash = u.hash`,
        [usage.map((u) => u.app), usage.map((u) => u.version), usage.map((u) => u.hash),
          usage.map((u) => u.requests), usage.map((u) => u.lastUsedAt)])
    },
    async recordServiceInstance (instance, hash, profile) {
      await pool.query(`INSERT INTO service_instances (instance, hash, profile, seen_at) VALUES ($1, $2, $3, now())
        ON CONFLICT (instance) DO UPDATE SET hash = $2, profile = $3, seen_at = now()`, [instance, hash, profile])
      await pool.query("DELETE FROM service_instances WHERE seen_at < now() - interval '1 day'")
    },
    async forgetServiceInstance (instance) {
      await pool.query('DELETE FROM service_instances WHERE instance = $1', [instance])
    },
    async serviceProfiles (withinMs) {
      return (await pool.query<{ hash: string; profile: string; instances: number; seenAt: string }>(
        `SELECT hash, MIN(profile) AS profile, COUNT(*)::int AS instances, ${ISO('MAX(seen_at)')} AS "seenAt"
         FROM service_instances WHERE seen_at > now() - $1 * interval '1 millisecond'
         GROUP BY hash ORDER BY MAX(seen_at) DESC`, [withinMs])).rows
    },
    watchChanges: sharedChanges((listener) =>
      followChangeLog({ connection, schema: schema ?? null, keepMs: changesKeepMs }, listener)),
    async ping () {
      await pool.query('SELECT 1')
    },
    async close () {
      await pool.end()
    }
  })
}

// Connection-level failures (server down or restarting, connection killed, pool exhausted past its
// timeout): SQLSTATE classes 08 (connection exception) and 57P (operator intervention: 57P03 "the
// database system is starting up / shutting down"), socket errors, pg's own messages for a lost or
// unobtainable connection, and the server refusing a new connection: 53300 (too many connections), 55000
// (database not accepting connections: ALLOW_CONNECTIONS false, as during maintenance), 3D000 (the
// database is gone) and class 28 (this role is refused: pg_hba.conf or password changed). The service's
// own statements (plain DML and an advisory lock) raise none of 55000, 3D000 or class 28 once
// connected, so these codes mean "no connection" here; readiness reports the outage (docs/operations.md).
const OUTAGE_CODES = /^(08...|57P0[1-3]|53300|55000|3D000|28...|ECONNREFUSED|ECONNRESET|ETIMEDOUT|EPIPE|ENOTFOUND|EAI_AGAIN|EHOSTUNREACH)$/
const OUTAGE_MESSAGES = /Connection terminated|timeout exceeded when trying to connect|Client has encountered a connection error|Cannot use a pool after calling end/

function isOutage (err: unknown): boolean {
  const { code, message } = (err ?? {}) as { code?: unknown; message?: unknown }
  return (
    (typeof code === 'string' && OUTAGE_CODES.test(code)) ||
    (typeof message === 'string' && OUTAGE_MESSAGES.test(message))
  )
}

/**
 * The database being unreachable is not a bug: callers get SERVICE_UNAVAILABLE ("retry shortly") from
 * both transports instead of an internal error; the pool reconnects by itself when the server returns.
 */
function reportingOutages (store: Store): Store {
  const wrapped = { ...store }
  for (const [name, value] of Object.entries(store)) {
    // watchChanges connects in the background and reports its own outages to its listener.
    if (typeof value !== 'function' || name === 'close' || name === 'watchChanges') continue
    ;(wrapped as Record<string, unknown>)[name] = async (...args: unknown[]) => {
      try {
        return await value.apply(store, args)
      } catch (err) {
        if (err instanceof AppError || !isOutage(err)) throw err
        throw new AppError('SERVICE_UNAVAILABLE', 'The database is unavailable; retry shortly')
      }
    }
  }
  return wrapped
}

/**
 * The migration version of the database (in `schema`, else the connection's search_path), read without
 * changing it: 0 when none is applied (`npm run migrate -- --dry-run`).
 */
export async function postgresSchemaVersion (url: string, schema: string | null): Promise<number> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 5000 })
  await client.connect()
  try {
    const table = schema ? `${pg.escapeIdentifier(schema)}.schema_migrations` : 'schema_migrations'
    const { rows } = await client.query<{ found: string | null }>('SELECT to_regclass($1) AS found', [table])
    if (!rows[0]?.found) return 0
    const version = await client.query<{ v: number | null }>(`SELECT MAX(version) AS v FROM ${table}`)
    return version.rows[0]?.v ?? 0
  } finally {
    await client.end()
  }
}

async function migrate (pool: pg.Pool, schema: string | null): Promise<void> {
  const client = await pool.connect()
  try {
    await client.query('SELECT pg_advisory_lock($1)', [MIGRATION_LOCK])
    try {
      if (schema) await client.query(`CREATE SCHEMA IF NOT EXISTS ${schema}`)
      await client.query(
        'CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, applied_at TIMESTAMPTZ NOT NULL DEFAULT now())'
      )
      const { rows } = await client.query<{ v: number | null }>('SELECT MAX(version) AS v FROM schema_migrations')
      for (let version = (rows[0]?.v ?? 0) + 1; version <= MIGRATIONS.length; version++) {
        await client.query('BEGIN')
        try {
          await client.query(MIGRATIONS[version - 1]!)
          await client.query('INSERT INTO schema_migrations (version) VALUES ($1)', [version])
          await client.query('COMMIT')
        } catch (err) {
          await client.query('ROLLBACK')
          throw err
        }
      }
      const unkeyed = await client.query<{ fingerprint: string; pem: string }>(
        'SELECT fingerprint, pem FROM partner_certificates WHERE issuer_serial IS NULL')
      for (const { fingerprint, issuerSerial } of missingIssuerSerials(unkeyed.rows)) {
        await client.query('UPDATE partner_certificates SET issuer_serial = $1 WHERE fingerprint = $2', [issuerSerial, fingerprint])
      }
    } finally {
      await client.query('SELECT pg_advisory_unlock($1)', [MIGRATION_LOCK])
    }
  } finally {
    client.release()
  }
}
