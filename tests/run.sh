#!/usr/bin/env bash
# The one test command: starts the services the integration tests need (installing them
# when missing), then runs every test. `.ci/run` calls exactly this.
set -euo pipefail
cd "$(dirname "$0")/.."
eval "$(scripts/services.sh)"
# The manifest checks' tools install while clippy builds (~2 min of pip on a fresh clone).
scripts/manifest-tools.sh &
tools=$!
cargo fmt --all -- --check
cargo clippy --all-targets -- -D warnings
wait "$tools"
# The book: a page missing from docs/SUMMARY.md or a broken build fails here; links and
# the generated reference are checked by tests/it/docs.rs.
.venv/bin/mdbook build docs
cargo test --no-fail-fast -- --test-threads="${SLUICE_TEST_THREADS:-2}"
