// The Kubernetes manifests (deploy/kubernetes/) without a cluster: each object is validated against
// Kubernetes' own OpenAPI schemas (kubernetes-models; the ServiceMonitor against the Prometheus Operator's
// CRD, @kubernetes-models/prometheus-operator), and type-checked against the same models' declarations so
// that a misspelt field (`readinessProb`), which the schemas let through as Kubernetes' API server would
// not, fails here too. Then they are kept in step with the service, as test/ops/compose.test.ts keeps
// docker-compose.yml: every variable is a setting the service reads (app/core/config/), the ports are the
// settings', the probes the health routes, the grace period longer than a shutdown, the selectors the pods'
// labels.
import { test } from 'tap'
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import ts from 'typescript'
import { parseAllDocuments } from 'yaml'
import { loadConfig, SETTING_NAMES } from '../../app/core/config/index.ts'
import { REPO } from '../helpers/server-process.ts'

const DIR = join(REPO, 'deploy/kubernetes')
const read = (path: string) => readFileSync(join(REPO, path), 'utf8')

interface Manifest { file: string; object: any }
const manifests: Manifest[] = readdirSync(DIR)
  .filter((file) => file.endsWith('.yaml') && file !== 'kustomization.yaml')
  .flatMap((file) => parseAllDocuments(readFileSync(join(DIR, file), 'utf8')).map((doc) => ({ file, object: doc.toJS() })))
const only = (kind: string) => {
  const found = manifests.filter((m) => m.object.kind === kind)
  if (found.length !== 1) throw new Error(`expected one ${kind}, found ${found.length}`)
  return found[0]!.object
}

/** The model (module and class) of each kind the manifests use. */
const MODELS: Record<string, { module: string; name: string }> = {
  'v1/ConfigMap': { module: 'kubernetes-models/v1/ConfigMap', name: 'ConfigMap' },
  'v1/Secret': { module: 'kubernetes-models/v1/Secret', name: 'Secret' },
  'v1/Service': { module: 'kubernetes-models/v1/Service', name: 'Service' },
  'apps/v1/Deployment': { module: 'kubernetes-models/apps/v1/Deployment', name: 'Deployment' },
  'policy/v1/PodDisruptionBudget': { module: 'kubernetes-models/policy/v1/PodDisruptionBudget', name: 'PodDisruptionBudget' },
  'networking.k8s.io/v1/Ingress': { module: 'kubernetes-models/networking.k8s.io/v1/Ingress', name: 'Ingress' },
  'batch/v1/Job': { module: 'kubernetes-models/batch/v1/Job', name: 'Job' },
  'monitoring.coreos.com/v1/ServiceMonitor': {
    module: '@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/ServiceMonitor',
    name: 'ServiceMonitor'
  }
}
const modelOf = (object: any) => {
  const model = MODELS[`${object.apiVersion}/${object.kind}`]
  if (!model) throw new Error(`no model for ${object.apiVersion} ${object.kind}: add it to MODELS`)
  return model
}

/** Every setting the service reads (app/core/config/). */
const settings = new Set(SETTING_NAMES)

test('every manifest is valid against the Kubernetes (and Prometheus Operator) schemas', async (t) => {
  t.ok(manifests.length >= 8, `${manifests.length} objects`)
  for (const { file, object } of manifests) {
    const { module, name } = modelOf(object)
    const Model = (await import(module))[name] as new (data: unknown) => { validate (): void }
    t.doesNotThrow(() => new Model(object).validate(), `${file}: ${object.kind} ${object.metadata?.name}`)
  }
  const { Deployment } = await import(MODELS['apps/v1/Deployment']!.module)
  const broken = structuredClone(only('Deployment'))
  broken.spec.template.spec.containers[0].ports[0].containerPort = 'http'
  t.throws(() => new Deployment(broken).validate(), /containerPort must be integer/, 'the validator refuses what Kubernetes would')
})

/**
 * The manifests as typed object literals, type-checked against the models' declarations: TypeScript refuses
 * a property a declaration does not have, at any depth. Returns the errors, each with its object.
 */
function typeErrors (objects: Manifest[]): string[] {
  const dir = mkdtempSync(join(tmpdir(), 'k8s-types-'))
  try {
    const lines = objects.map(({ object }, i) => {
      const { module, name } = modelOf(object)
      // The declarations beside the module the test loads (resolved from this repository's node_modules).
      const declarations = fileURLToPath(import.meta.resolve(module)).replace(/\.js$/, '.d.ts')
      return `import type { I${name} as T${i} } from ${JSON.stringify(declarations)}\n` +
        `export const object${i}: T${i} = ${JSON.stringify(object)}\n`
    })
    const file = join(dir, 'manifests.ts')
    writeFileSync(file, lines.join(''))
    const program = ts.createProgram([file], {
      strict: true,
      noEmit: true,
      skipLibCheck: true,
      allowImportingTsExtensions: true,
      module: ts.ModuleKind.NodeNext,
      moduleResolution: ts.ModuleResolutionKind.NodeNext,
      target: ts.ScriptTarget.ES2022,
      types: []
    })
    return ts.getPreEmitDiagnostics(program).map((d) => {
      const line = d.file && d.start !== undefined ? d.file.getLineAndCharacterOfPosition(d.start).line : -1
      const index = Math.floor(line / 2)
      const where = objects[index] ? `${objects[index].file} ${objects[index].object.kind}` : 'manifests.ts'
      return `${where}: ${ts.flattenDiagnosticMessageText(d.messageText, ' ')}`
    })
  } finally {
    rmSync(dir, { recursive: true, force: true })
  }
}

test('no field the Kubernetes API does not know (a misspelt one is refused)', async (t) => {
  t.same(typeErrors(manifests), [], 'the manifests type-check against the models')
  const misspelt = structuredClone(manifests.find((m) => m.object.kind === 'Deployment')!)
  const container = misspelt.object.spec.template.spec.containers[0]
  container.readinessProb = container.readinessProbe
  const errors = typeErrors([misspelt])
  t.equal(errors.length, 1, 'the misspelt field is found')
  t.match(errors[0], /^deployment\.yaml Deployment: Object literal may only specify known properties, and .*readinessProb.* does not exist in type 'IContainer'/)
})

test('kustomization.yaml lists files that exist, the Secret template and the optional objects excepted', async (t) => {
  const kustomization = parseAllDocuments(read('deploy/kubernetes/kustomization.yaml'))[0]!.toJS()
  const files = readdirSync(DIR)
  for (const resource of kustomization.resources) t.ok(files.includes(resource), `${resource} exists`)
  t.same([...kustomization.resources].sort(), ['configmap.yaml', 'deployment.yaml', 'ingress.yaml', 'poddisruptionbudget.yaml', 'service.yaml'])
  t.same(kustomization.images.map((i: { name: string }) => i.name), [only('Deployment').spec.template.spec.containers[0].image],
    'the image it sets is the Deployment\'s')
})

test('the manifests are in step with the settings, the image and the health routes', async (t) => {
  const configMap = only('ConfigMap')
  const secret = only('Secret')
  const deployment = only('Deployment')
  const pod = deployment.spec.template
  const [container] = pod.spec.containers
  const env: Record<string, string> = configMap.data
  for (const key of [...Object.keys(env), ...Object.keys(secret.stringData)]) {
    t.ok(settings.has(key), `${key} is a setting the service reads`)
  }
  t.same(Object.keys(secret.stringData).sort(), ['DATABASE_URL', 'JWT_SECRET', 'PARTNER_SECRET_KEY', 'REDIS_URL'],
    'the secrets of the shared topology')
  t.throws(() => loadConfig({ ...env, ...secret.stringData }), /JWT_SECRET.*32|32.*JWT_SECRET/s, 'the template\'s placeholders cannot start a service')
  const config = loadConfig({ ...env, JWT_SECRET: 'j'.repeat(32), PARTNER_SECRET_KEY: 'p'.repeat(32), DATABASE_URL: secret.stringData.DATABASE_URL, REDIS_URL: secret.stringData.REDIS_URL })
  t.equal(config.profile, 'production')
  t.same(container.envFrom, [
    { configMapRef: { name: configMap.metadata.name } },
    { secretRef: { name: secret.metadata.name } }
  ], 'the instances read both')

  // Ports: the settings', named for the probes, the Service and the scrape.
  const port = (name: string) => container.ports.find((p: { name: string }) => p.name === name)?.containerPort
  t.equal(port('http'), config.server.port, 'http is PORT')
  t.equal(port('metrics'), config.server.metricsPort, 'metrics is METRICS_PORT')
  t.equal(pod.metadata.annotations['prometheus.io/port'], String(config.server.metricsPort))
  t.equal(pod.metadata.annotations['prometheus.io/path'], '/metrics')
  const service = only('Service')
  t.same(service.spec.ports.map((p: { targetPort: string }) => p.targetPort), ['http', 'metrics'])
  t.equal(only('ServiceMonitor').spec.endpoints[0].port, 'metrics', 'the ServiceMonitor scrapes the metrics port')
  t.equal(service.metadata.name, 'graphql-query-service', 'the job the alerts and the dashboard select (deploy/prometheus/alerts.yml)')
  t.match(read('deploy/prometheus/alerts.yml'), /job="graphql-query-service"/)
  const ingressBackend = only('Ingress').spec.rules[0].http.paths[0].backend.service
  t.same(ingressBackend, { name: service.metadata.name, port: { name: 'http' } }, 'the Ingress sends to the API port only')
  const bodyCap = only('Ingress').metadata.annotations['nginx.ingress.kubernetes.io/proxy-body-size']
  t.equal(Number.parseInt(bodyCap) * 1024 * 1024, config.server.bodyLimitBytes, 'the ingress caps bodies at BODY_LIMIT_BYTES')

  // Probes: the health routes.
  const health = read('routes/health.ts')
  t.equal(container.readinessProbe.httpGet.path, '/health/ready')
  t.equal(container.livenessProbe.httpGet.path, '/health/live')
  t.equal(container.startupProbe.httpGet.path, '/health/live')
  for (const path of ['/health/ready', '/health/live']) t.match(health, `app.get('${path}'`, `${path} is served`)
  for (const probe of ['readinessProbe', 'livenessProbe', 'startupProbe']) t.equal(container[probe].httpGet.port, 'http', `${probe} on the API port`)

  // Stopping: longer than preStop, the graceful shutdown, the idle drain and a margin for the log.
  const preStopSec = Number(container.lifecycle.preStop.exec.command[1])
  const stopMs = preStopSec * 1000 + config.server.shutdownGraceMs + config.server.shutdownIdleDrainMs
  t.ok(pod.spec.terminationGracePeriodSeconds * 1000 >= stopMs + 5000,
    `terminationGracePeriodSeconds ${pod.spec.terminationGracePeriodSeconds} s > ${stopMs / 1000} s + 5 s`)

  // The image: its user, its command.
  const dockerfile = read('Dockerfile')
  t.match(dockerfile, /^USER node$/m)
  t.equal(pod.spec.securityContext.runAsUser, 1000, 'the node user of the node image')
  t.notOk(container.command, 'the image\'s CMD runs (node app/server.ts)')
  t.equal(container.securityContext.readOnlyRootFilesystem, true)
  const job = only('Job')
  t.same(job.spec.template.spec.containers[0].command, ['node', 'cli/migrate.ts'], 'the migration Job runs npm run migrate\'s command')
  t.match(JSON.parse(read('package.json')).scripts.migrate, /node cli\/migrate\.ts/)
  t.match(dockerfile, /^COPY cli \.\/cli$/m, 'which the image ships')

  // Selectors: the pods' labels; two or more instances, one of which a disruption leaves.
  const labels = pod.metadata.labels
  const selects = (selector: Record<string, string>) => Object.entries(selector).every(([k, v]) => labels[k] === v)
  t.ok(selects(deployment.spec.selector.matchLabels), 'the Deployment selects its pods')
  t.ok(selects(service.spec.selector), 'the Service selects the pods')
  t.ok(selects(only('PodDisruptionBudget').spec.selector.matchLabels), 'the PodDisruptionBudget covers the pods')
  t.ok(selects(only('ServiceMonitor').spec.selector.matchLabels) && Object.entries(only('ServiceMonitor').spec.selector.matchLabels)
    .every(([k, v]) => service.metadata.labels[k] === v), 'the ServiceMonitor selects the Service')
  t.notOk(selects(job.spec.template.metadata.labels ?? {}) && job.spec.template.metadata.labels?.['app.kubernetes.io/name'],
    'the migration Job\'s pod is not one of the Service\'s')
  t.ok(deployment.spec.replicas >= 2, 'two instances or more')
  t.ok(only('PodDisruptionBudget').spec.minAvailable < deployment.spec.replicas, 'a drain can proceed')
  t.equal(deployment.spec.strategy.rollingUpdate.maxUnavailable, 0, 'a rollout never drops capacity')
})
