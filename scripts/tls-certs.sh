#!/usr/bin/env bash
# Writes a throw-away PKI for the TLS tests into DIR (kept when already there):
#   ca.pem ca.key        the test CA
#   other-ca.pem         a CA that signed nothing here (the "wrong CA")
#   server.pem/.key      for DNS:localhost only, so 127.0.0.1 is a wrong hostname
#   expired.pem/.key     for localhost, valid only in 2020
#   client.pem/.key      CN=postgres, for client-certificate authentication
# EC P-256 keys in PKCS#8, which rustls, OpenSSL (librdkafka) and PostgreSQL all read.
set -euo pipefail
DIR=${1:?usage: tls-certs.sh DIR}
mkdir -p "$DIR"
cd "$DIR"
[ -s client.key ] && exit 0

key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; }
ca() { # name subject
  key "$1.key"
  openssl req -x509 -new -key "$1.key" -subj "/CN=$2" -days 3650 -out "$1.pem" \
    -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign
}
leaf() { # name subject extensions
  key "$1.key"
  openssl req -new -key "$1.key" -subj "/CN=$2" -out "$1.csr"
  printf '%s\n' "$3" >"$1.ext"
  openssl x509 -req -in "$1.csr" -CA ca.pem -CAkey ca.key -CAcreateserial -days 3650 \
    -extfile "$1.ext" -out "$1.pem" 2>/dev/null
  rm -f "$1.csr" "$1.ext"
}

ca ca "sluice test CA"
ca other-ca "sluice other CA"
rm -f other-ca.key
leaf server localhost "subjectAltName=DNS:localhost
extendedKeyUsage=serverAuth"
leaf client postgres "extendedKeyUsage=clientAuth"

# `openssl x509` cannot back-date; `openssl ca` can.
key expired.key
openssl req -new -key expired.key -subj "/CN=localhost" -out expired.csr
mkdir -p ca-db && : >ca-db/index.txt && echo 1000 >ca-db/serial
cat >ca-db/ca.cnf <<'EOF'
[ca]
default_ca = test
[test]
database = ca-db/index.txt
serial = ca-db/serial
new_certs_dir = ca-db
default_md = sha256
policy = any
copy_extensions = none
x509_extensions = ext
[any]
commonName = supplied
[ext]
subjectAltName = DNS:localhost
extendedKeyUsage = serverAuth
EOF
openssl ca -batch -config ca-db/ca.cnf -cert ca.pem -keyfile ca.key -in expired.csr \
  -startdate 20200101000000Z -enddate 20200102000000Z -notext -out expired.pem 2>/dev/null
rm -rf ca-db expired.csr ca.srl
chmod 0644 ./*.pem && chmod 0600 ./*.key
