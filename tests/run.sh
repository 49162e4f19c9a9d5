#!/usr/bin/env bash
# The one test command: starts the services the integration tests need (installing them
# when missing), then runs every test. `.ci/run` calls exactly this.
set -euo pipefail
cd "$(dirname "$0")/.."
eval "$(scripts/services.sh)"
cargo fmt --all -- --check
cargo clippy --all-targets -- -D warnings
cargo test --no-fail-fast -- --test-threads="${SLUICE_TEST_THREADS:-2}"
