# syntax=docker/dockerfile:1

# Build: pg_query_go compiles libpg_query with cgo, so the binary links
# against glibc and the runtime image must be glibc-based too.
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=""
RUN CGO_ENABLED=1 go build -trimpath \
        -ldflags "-s -w -X main.version=${VERSION}" \
        -o /out/ttlproxy ./cmd/ttlproxy

FROM debian:bookworm-slim
RUN useradd --system --uid 10001 --no-create-home --shell /usr/sbin/nologin ttlproxy \
    && mkdir -p /etc/ttlproxy
COPY --from=build /out/ttlproxy /usr/local/bin/ttlproxy
USER ttlproxy
# Mount the configuration at /etc/ttlproxy/ttlproxy.yaml; inside a container
# it needs listen: 0.0.0.0:6432 and admin_listen: 0.0.0.0:9187 (or the
# --listen and --admin-listen flags) to be reachable from outside.
# 6432: PostgreSQL clients; 9187: /metrics, /healthz, /readyz.
EXPOSE 6432 9187
ENTRYPOINT ["ttlproxy"]
CMD ["serve", "--config", "/etc/ttlproxy/ttlproxy.yaml"]
