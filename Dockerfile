# syntax=docker/dockerfile:1
# Build: docker build --build-arg VERSION=1.0.0 -t serve-zone/ingress:1.0.0 .
# Several architectures (the Go compiler cross-compiles on the build machine's platform):
#   docker buildx build --platform linux/amd64,linux/arm64 --build-arg VERSION=1.0.0 \
#     -t serve-zone/ingress:1.0.0 .
#
# The base images are named in full (registry/repository:tag), so that engines which refuse
# short names (podman) build this file as it is. They are not pinned by digest here (this
# file was written without access to the registries); pin them for reproducible builds:
#
#   docker buildx imagetools inspect docker.io/library/golang:1.27-bookworm   # prints the digest
#   docker build --build-arg GO_IMAGE=docker.io/library/golang:1.27-bookworm@sha256:<digest> \
#     --build-arg RUNTIME_IMAGE=gcr.io/distroless/static-debian12:nonroot@sha256:<digest> .
ARG GO_IMAGE=docker.io/library/golang:1.27-bookworm
ARG RUNTIME_IMAGE=gcr.io/distroless/static-debian12:nonroot

FROM --platform=$BUILDPLATFORM ${GO_IMAGE} AS build
ARG VERSION=0.1.0-dev
# Set by buildx for each --platform (empty with a plain docker build: the build machine's).
ARG TARGETOS
ARG TARGETARCH
# The image's Go unless go.mod's toolchain line (go1.27.3) is newer: then that one, from
# the module proxy. The golang images set GOTOOLCHAIN=local, which would build with an
# older 1.27.x that .ci/run's govulncheck gate refuses.
ENV GOTOOLCHAIN=auto
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 GOOS=${TARGETOS:-linux} GOARCH=${TARGETARCH} go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/ingress ./cmd/ingress \
 && mkdir -p /out/state && chmod 0700 /out/state

# distroless/static carries CA certificates and a nonroot user (65532), nothing else.
FROM ${RUNTIME_IMAGE}
COPY --from=build /out/ingress /usr/local/bin/ingress
COPY --from=build --chown=65532:65532 /out/state /var/lib/ingress
USER 65532:65532
# Defaults as environment variables, not as CMD arguments, so that
# `docker run IMAGE --routes /etc/ingress/routes.json` keeps them (every flag has its
# INGRESS_* variable; the command line wins). The state directory must be writable by
# 65532:65532: a named volume is (it starts as a copy of the image's directory); a bind
# mount needs `chown 65532:65532` on the host, or the ingress refuses to start (exit 2).
# The admin listener (/metrics, /healthz, /readyz, /v1/traffic-statistics) listens on every
# interface of the container so that a published port and orchestrator probes reach it;
# it has no authentication: publish it on loopback only (-p 127.0.0.1:9090:9090), or set
# INGRESS_ADMIN_ADDR=127.0.0.1:9090 to keep it inside the container (the health check
# follows that variable).
ENV INGRESS_STATE_DIR=/var/lib/ingress \
    INGRESS_ADMIN_ADDR=:9090
# Ports 80 and 443 are privileged: run with --cap-add NET_BIND_SERVICE (never as root), or
# move the listeners with --http-addr/--https-addr. Behind a port map that changes the
# HTTPS port (-p 8443:443/tcp -p 8443:443/udp) pass --public-https-port 8443.
EXPOSE 80/tcp 443/tcp 443/udp 9090/tcp
VOLUME ["/var/lib/ingress"]
# Healthy means ready: a route table applied and the listeners up (GET /readyz on
# INGRESS_ADMIN_ADDR). A relay that has computed no table yet keeps it unhealthy.
HEALTHCHECK --interval=10s --timeout=4s --start-period=30s --retries=3 \
  CMD ["/usr/local/bin/ingress", "healthcheck"]
ENTRYPOINT ["/usr/local/bin/ingress"]
