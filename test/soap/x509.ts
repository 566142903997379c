// Test certificates for WS-Security signatures, made at test time with the openssl command (node:crypto
// makes key pairs but not certificates; openssl is on every machine that runs these tests).
import { execFileSync } from 'node:child_process'
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import soap from 'soap'
import { SOAP11, SOAP12 } from './helpers.ts'

export interface TestCertificate {
  key: string
  cert: string
  /** The certificate's PEM file, for `npm run partner:create -- --certificate`. */
  certPath: string
}

/** A self-signed RSA certificate valid `days` from now, or between two dates (YYYYMMDDHHMMSSZ). */
export function makeCertificate (
  dir: string, name: string, validity: { days: number } | { start: string; end: string } = { days: 2 }
): TestCertificate {
  const keyPath = join(dir, `${name}.key`)
  const certPath = join(dir, `${name}.pem`)
  const subject = `/CN=${name}`
  if ('days' in validity) {
    execFileSync('openssl', ['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', keyPath, '-out', certPath,
      '-days', String(validity.days), '-subj', subject], { stdio: 'ignore' })
  } else {
    // `openssl req` cannot date a certificate in the past; `openssl ca -selfsign` can.
    const ca = join(dir, `${name}-ca`)
    mkdirSync(ca)
    writeFileSync(join(ca, 'index.txt'), '')
    writeFileSync(join(ca, 'serial'), '01\n')
    writeFileSync(join(ca, 'ca.cnf'), `[ca]\ndefault_ca = my\n[my]\ndatabase = ${ca}/index.txt\n` +
      `serial = ${ca}/serial\nnew_certs_dir = ${ca}\ndefault_md = sha256\npolicy = any\n[any]\ncommonName = supplied\n`)
    execFileSync('openssl', ['req', '-new', '-newkey', 'rsa:2048', '-nodes', '-keyout', keyPath,
      '-out', join(ca, 'r.csr'), '-subj', subject], { stdio: 'ignore' })
    execFileSync('openssl', ['ca', '-batch', '-config', join(ca, 'ca.cnf'), '-selfsign', '-keyfile', keyPath,
      '-in', join(ca, 'r.csr'), '-out', certPath, '-startdate', validity.start, '-enddate', validity.end, '-notext'],
    { stdio: 'ignore' })
  }
  return { key: readFileSync(keyPath, 'utf8'), cert: readFileSync(certPath, 'utf8'), certPath }
}

/** A request envelope (with an empty Header for the signer to fill) signed by node-soap's WSSecurityCert. */
export function signedEnvelope (
  version: '1.1' | '1.2', body: string, signer: TestCertificate, options: Record<string, unknown> = {}
): string {
  const ns = version === '1.1' ? SOAP11 : SOAP12
  const xml = `<soap:Envelope xmlns:soap="${ns}"><soap:Header></soap:Header><soap:Body>${body}</soap:Body>` +
    '</soap:Envelope>'
  return new soap.WSSecurityCert(signer.key, signer.cert, '', options).postProcess(xml, 'soap')
}
