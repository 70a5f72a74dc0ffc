# syntax=docker/dockerfile:1
# Multi-stage: build with dev dependencies, run with production dependencies only, as a non-root user.
FROM node:20-bookworm-slim AS build
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --ignore-scripts
COPY tsconfig.json tsconfig.build.json ./
COPY src ./src
COPY examples ./examples
COPY proto ./proto
RUN npm run build

FROM node:20-bookworm-slim AS deps
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --omit=dev --ignore-scripts

FROM node:20-bookworm-slim
ENV NODE_ENV=production
WORKDIR /app
COPY --from=deps /app/node_modules ./node_modules
COPY --from=build /app/dist ./dist
COPY package.json ./
COPY examples ./examples
COPY proto ./proto
# The operator console's page, scripts and styles (uPlot comes from node_modules).
COPY assets ./assets
USER node
# ext_authz / ext_proc / gRPC health, admin (HTTP authz, API, metrics)
EXPOSE 9001 9090
# A fixed young generation big enough that a busy driver's replaced snapshots die young (and that does not
# shrink after a quiet spell, when each request would cost more CPU), no pretenuring that
# would allocate them in the old generation to begin with, and an old generation that may double before
# a full GC, which at 100k sandboxes costs about a second of CPU (docs/operations.md).
ENTRYPOINT ["node", "--min-semi-space-size=64", "--max-semi-space-size=64", "--no-allocation-site-pretenuring", "--heap-growing-percent=100", "dist/src/cli/main.js"]
CMD ["serve"]
