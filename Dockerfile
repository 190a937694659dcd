# Portico: a static binary on an empty base image, running as a non-root user.
FROM golang:1.26 AS build
# Portico needs Go 1.27: the go command of the image fetches this toolchain
# like a module on first use.
ENV GOTOOLCHAIN=go1.27.3
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# What "portico version" and portico_build_info report: the image has no
# .git to read them from (docker build --build-arg VERSION=v0.1.0 --build-arg COMMIT=$(git rev-parse HEAD)).
ARG VERSION=""
ARG COMMIT=""
RUN CGO_ENABLED=0 go build -trimpath \
      -ldflags="-s -w -X portico.dev/portico/internal/shared/buildinfo.version=${VERSION} -X portico.dev/portico/internal/shared/buildinfo.commit=${COMMIT}" \
      -o /out/portico ./cmd/portico \
 && mkdir -p /out/etc /out/tmp \
 && echo 'portico:x:65532:65532:portico:/nonexistent:/sbin/nologin' > /out/etc/passwd \
 && echo 'portico:x:65532:' > /out/etc/group

FROM scratch
COPY --from=build /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY --from=build /out/etc/passwd /out/etc/group /etc/
COPY --from=build --chown=65532:65532 /out/tmp /tmp
COPY --from=build /out/portico /portico
USER 65532:65532
EXPOSE 8080 8443
ENTRYPOINT ["/portico"]
CMD ["serve"]
