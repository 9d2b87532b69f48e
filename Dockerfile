# Edgehub in a container: a static binary (pure Go, SQLite included) on an
# empty base image, running as an unprivileged user, with the backlog in a
# volume. Build: docker build -t edgehub .
# Run:   docker run -p 8080:8080 -v edgehub-data:/data \
#          -e EDGEHUB_ADMIN_KEY="$(head -c 32 /dev/urandom | base64)" edgehub
# tests/packaging_test.go runs this file's build command and starts the
# result in an empty root as this user.
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/edgehub ./cmd/edgehub
# The directories the image needs, owned by the user it runs as: the data
# volume, and a temporary directory for SQLite.
RUN mkdir -p /out/data /out/tmp && chown 65532:65532 /out/data && chmod 1777 /out/tmp

FROM scratch
COPY --from=build /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY --from=build /out/edgehub /edgehub
COPY --from=build /out/data /data
COPY --from=build /out/tmp /tmp
USER 65532:65532
VOLUME /data
EXPOSE 8080
ENV EDGEHUB_DATA=/data EDGEHUB_ADDR=0.0.0.0:8080
# Ready once the backlog is open and migrated (/readyz); the check asks
# 127.0.0.1:8080, so set EDGEHUB_SERVER too if EDGEHUB_ADDR moves the port.
HEALTHCHECK --interval=10s --timeout=6s --start-period=10s CMD ["/edgehub", "health"]
ENTRYPOINT ["/edgehub"]
CMD ["serve"]
