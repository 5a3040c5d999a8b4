# syntax=docker/dockerfile:1
# Builds both production binaries, stripped; one image runs either (`worker serve`,
# `master serve`). Not master-dev (`master dev`, the embedded etcd server): a production
# image has no use for it. The final stage is distroless (CA certificates, no shell),
# runs as a non-root user, and works on a read-only root filesystem (nothing is written
# outside DATA_URL's directory for file:// and /tmp): deploy/kubernetes runs it so, and
# deploy/kubernetes/dockerfile_test.go checks these properties.

FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
ARG VERSION=devel
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 go build -trimpath \
      -ldflags "-s -w -X github.com/tidemark-io/tidemark/internal/cli.version=${VERSION}" \
      -o /out/ ./cmd/worker ./cmd/master \
 && mkdir -p /out/data

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/worker /out/master /usr/local/bin/
# A named volume mounted here starts with this directory's owner, so the non-root
# worker can write file:// stores into it.
COPY --from=build --chown=65532:65532 /out/data /data
USER 65532:65532
# The worker's listeners; the master's service sets its own (7070 gRPC, 7080 HTTP).
ENV DATA_URL=file:///data/store HTTP_ADDR=0.0.0.0:8080 GRPC_ADDR=0.0.0.0:9090
EXPOSE 8080 9090 7070 7080
CMD ["worker", "serve"]
