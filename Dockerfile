# syntax=docker/dockerfile:1
# Build: docker build --build-arg VERSION=1.0.0 -t serve-zone/ingress .
FROM golang:1.26-bookworm AS build
ARG VERSION=0.1.0-dev
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 GOOS=linux go build -trimpath \
      -ldflags "-s -w -X main.version=${VERSION}" \
      -o /out/ingress ./cmd/ingress \
 && mkdir -p /out/state

# distroless/static carries CA certificates and a nonroot user (65532), nothing else.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/ingress /usr/local/bin/ingress
COPY --from=build --chown=65532:65532 /out/state /var/lib/ingress
USER 65532:65532
# Ports 80 and 443 are privileged: run with --cap-add NET_BIND_SERVICE (never as root), or
# move the listeners with --http-addr/--https-addr.
EXPOSE 80/tcp 443/tcp 443/udp 9090/tcp
VOLUME ["/var/lib/ingress"]
HEALTHCHECK --interval=10s --timeout=4s --start-period=5s --retries=3 \
  CMD ["/usr/local/bin/ingress", "healthcheck", "127.0.0.1:9090"]
ENTRYPOINT ["/usr/local/bin/ingress"]
CMD ["--state-dir", "/var/lib/ingress"]
