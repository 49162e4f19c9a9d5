# Multi-stage build: dependencies are compiled in their own layer (cached until
# Cargo.toml/Cargo.lock change), the runtime image holds one binary and runs as non-root.
FROM rust:1.95-bookworm AS build
# librdkafka is built with the system's OpenSSL (Kafka TLS and SASL).
RUN apt-get update \
 && apt-get install -y --no-install-recommends libssl-dev pkg-config \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
RUN mkdir -p src benches \
 && echo 'fn main() {}' > src/main.rs && touch src/lib.rs \
 && for b in $(sed -n 's/^name = "\(.*\)"$/\1/p' Cargo.toml | tail -n +2); do echo 'fn main() {}' > "benches/$b.rs"; done \
 && cargo build --release --locked --bin sluice \
 && rm -rf src benches
COPY src src
COPY benches benches
# The built-in default configuration is compiled into the binary.
COPY config config
RUN touch src/main.rs src/lib.rs && cargo build --release --locked --bin sluice

FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates curl libssl3 \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --home-dir /var/lib/sluice --create-home sluice
COPY --from=build /src/target/release/sluice /usr/local/bin/sluice
COPY config /etc/sluice
COPY examples /usr/share/sluice/examples
USER sluice
WORKDIR /var/lib/sluice
EXPOSE 9898
HEALTHCHECK --interval=10s --timeout=3s --start-period=10s \
  CMD curl -fsS http://127.0.0.1:9898/healthz || exit 1
ENTRYPOINT ["sluice"]
CMD ["run", "--config", "/etc/sluice/compose-worker.toml"]
