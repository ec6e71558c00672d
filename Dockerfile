# Untested on the build machines of this repository (no image can be built or pulled there).
# Build: docker build -t ghcr.io/cozystack/tenant-gateway:0.1.0 .
# The toolchain link/serve-functions.txt was made with (build.rs orders the code by it only
# then; bench/textorder/generate remakes it for another).
FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked --bin tenant-gateway \
 && cp target/release/tenant-gateway /tenant-gateway

# glibc runtime (the release build links glibc dynamically), no shell, non-root.
FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /tenant-gateway /usr/local/bin/tenant-gateway
USER 65532:65532
EXPOSE 8443 9090
ENTRYPOINT ["/usr/local/bin/tenant-gateway"]
CMD ["serve"]
