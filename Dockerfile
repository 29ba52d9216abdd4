# shepherd's container image. Build context: the repository root.
#   docker build -t ghcr.io/shepherd-k8s/shepherd:$(git describe --tags --always) .
# The binary is static (CGO off) and runs as the distroless nonroot user
# (65532), matching deploy/default's securityContext.

FROM golang:1.26 AS build
WORKDIR /src
ENV CGO_ENABLED=0 GOTOOLCHAIN=local GOFLAGS=-buildvcs=false
# Dependencies first, so source edits reuse the module cache layer.
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
ARG VERSION=dev
ARG TARGETOS=linux
ARG TARGETARCH=amd64
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    GOOS=$TARGETOS GOARCH=$TARGETARCH go build -trimpath \
      -ldflags "-s -w -X github.com/shepherd-k8s/shepherd/cmd/shepherd/app.version=${VERSION}" \
      -o /out/shepherd ./cmd/shepherd

FROM gcr.io/distroless/static:nonroot
COPY --from=build /out/shepherd /shepherd
USER 65532:65532
ENTRYPOINT ["/shepherd"]
CMD ["serve"]
