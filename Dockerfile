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

# Runtime. CI assembles the same stage without a container engine
# (release/image.sh: this stage's RUN in a Debian rootfs made by
# mmdebstrap, the same configuration) and checks that the two agree;
# internal/dockerfile refuses an instruction image.sh does not assemble.
FROM debian:bookworm-slim
ARG VERSION=""
# ca-certificates: upstream_tls verify-full against a server whose
# certificate chains to a public CA (RDS, Cloud SQL, Azure) needs no
# mounted root certificate. tzdata: TZ for the logs' local times.
# A fixed uid and gid, numeric in USER, so that runAsNonRoot can check it.
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates tzdata \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --system --gid 10001 ttlproxy \
    && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
        --shell /usr/sbin/nologin ttlproxy \
    && mkdir -p /etc/ttlproxy
COPY --from=build /out/ttlproxy /usr/local/bin/ttlproxy
USER 10001:10001
LABEL org.opencontainers.image.title="ttlproxy" \
      org.opencontainers.image.description="PostgreSQL proxy with row-level soft TTL" \
      org.opencontainers.image.source="https://github.com/ttlproxy/ttlproxy" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}"
# Mount the configuration at /etc/ttlproxy/ttlproxy.yaml; inside a container
# it needs listen: 0.0.0.0:6432 and admin_listen: 0.0.0.0:9187 (or the
# --listen and --admin-listen flags) to be reachable from outside.
# 6432: PostgreSQL clients; 9187: /metrics, /healthz, /readyz.
EXPOSE 6432 9187
# /healthz of the admin server the configuration names (over HTTPS when its
# web configuration has TLS). A command line with another --config or
# --admin-listen needs its own --health-cmd.
HEALTHCHECK --interval=30s --timeout=5s --start-period=10s --retries=3 \
    CMD ["ttlproxy", "healthcheck", "--config", "/etc/ttlproxy/ttlproxy.yaml"]
ENTRYPOINT ["ttlproxy"]
CMD ["serve", "--config", "/etc/ttlproxy/ttlproxy.yaml"]
