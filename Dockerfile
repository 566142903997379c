# syntax=docker/dockerfile:1
# The service's image, as docker-compose.yml runs it (two replicas behind nginx). Two stages: the
# production dependencies installed from the lockfile, then a runtime with only what the service
# runs (no dev dependencies, no tests, no build step: Node 24 strips the types itself), owned by
# root and run as the unprivileged `node` user.
ARG NODE_IMAGE=node:24-bookworm-slim

FROM ${NODE_IMAGE} AS deps
WORKDIR /app
COPY package.json package-lock.json ./
# --ignore-scripts: the only install script is the `node` package's, which fetches a Node binary for
# npm scripts on developer machines; in the image, the base image's Node 24 runs the service.
RUN npm ci --omit=dev --ignore-scripts --no-audit --no-fund

FROM ${NODE_IMAGE} AS runtime
ENV NODE_ENV=production \
    HOST=0.0.0.0 \
    PORT=3000 \
    PERSISTED_MANIFEST=persisted/manifest.json
WORKDIR /app
COPY --from=deps /app/node_modules ./node_modules
COPY package.json ./
COPY app ./app
COPY plugins ./plugins
COPY routes ./routes
COPY cli ./cli
COPY persisted ./persisted
# The embedded store's directory, for runs without DATABASE_URL: the only place the service writes.
RUN mkdir -p /app/data && chown node:node /app/data
USER node
EXPOSE 3000
# Ready = the store and Redis answer (GET /health/ready); a failing instance is restarted by its orchestrator.
HEALTHCHECK --interval=10s --timeout=3s --start-period=20s --retries=3 \
  CMD ["node", "-e", "fetch('http://127.0.0.1:' + (process.env.PORT || 3000) + '/health/ready').then((r) => process.exit(r.ok ? 0 : 1), () => process.exit(1))"]
# SIGTERM starts the graceful shutdown (in-flight requests finish, subscriptions complete, stores close).
STOPSIGNAL SIGTERM
CMD ["node", "app/server.ts"]
