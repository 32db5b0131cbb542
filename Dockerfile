# syntax=docker/dockerfile:1

# Build: compile TypeScript with the dev dependencies.
FROM node:20-alpine AS build
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci
COPY tsconfig.json ./
COPY src ./src
RUN npm run build

# Runtime: production dependencies, the compiled code (with the descriptor set reflection serves),
# the Redis scripts and the examples.
FROM node:20-alpine AS runtime
ENV NODE_ENV=production
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --omit=dev && npm cache clean --force
COPY --from=build /app/dist/src ./dist/src
# Read at run time: the Redis scripts.
COPY lua ./lua
COPY examples ./examples
# A config to start with; mount yours over /etc/sluice.
COPY examples/config /etc/sluice
# envoyproxy/ratelimit's command: Envoy Gateway starts the rate-limit container as `/bin/ratelimit`
# with its settings in the environment, as uid 65534 on a read-only root filesystem (sluice writes
# no file: logs go to stdout).
COPY --chmod=0755 deploy/image/ratelimit /bin/ratelimit
USER node
EXPOSE 8080 8081
# Port 8080 is the default HTTP_PORT; change it here too if you change that.
HEALTHCHECK --interval=10s --timeout=3s --start-period=10s --retries=3 \
  CMD ["node", "-e", "fetch('http://127.0.0.1:8080/healthcheck').then((r) => process.exit(r.ok ? 0 : 1), () => process.exit(1))"]
ENTRYPOINT ["node", "dist/src/main.js"]
CMD ["serve", "--config", "/etc/sluice"]
