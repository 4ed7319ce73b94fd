# The mongolock command's image, built by GoReleaser (.goreleaser.yaml) from
# the release's own static binaries (CGO_ENABLED=0), one per platform in
# $TARGETPLATFORM/: the image holds the same binary as the release's archives,
# and only it, on distroless (CA certificates for mongodb+srv and TLS, time
# zone data, no shell), running as distroless's non-root user.
FROM gcr.io/distroless/static-debian12:nonroot
ARG TARGETPLATFORM
COPY $TARGETPLATFORM/mongolock /usr/local/bin/mongolock
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/mongolock"]
