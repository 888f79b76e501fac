#!/usr/bin/env bash
# Test certificates, made with the openssl command line into DIR (P-256 keys, valid 30 days unless
# said otherwise). tests/integration/tls_test.sh and bench/tls_rate.sh use them.
#   ca.crt/key          the CA every server and client certificate below chains to
#   server.crt/key      CN localhost, SAN DNS:localhost, IP:127.0.0.1 (isnd)
#   agg.crt/key         CN isn-agg, SAN DNS:localhost, IP:127.0.0.1, URI spiffe://isn.test/isn-agg:
#                       isn-agg's, used both to serve and to identify itself to replicas
#   client.crt/key      CN isn-query, URI spiffe://isn.test/isn-query
#   stranger.crt/key    CN isn-query, signed by another CA (other-ca.crt)
#   expired.crt/key     CN isn-query, signed by ca.crt, valid only in January 2020
#   rotated-N.crt/key   N = 1..ROTATIONS (env, default 0): more server certificates, serial N+100
#   usage: tls_certs.sh DIR
set -euo pipefail
dir=$1
mkdir -p "$dir"
cd "$dir"
key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; }
ca() { # NAME CN
  key "$1.key"
  openssl req -x509 -new -key "$1.key" -subj "/CN=$2" -days 30 -out "$1.crt" \
    -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign 2>/dev/null
}
leaf() { # NAME CN SAN CA SERIAL
  key "$1.key"
  openssl req -new -key "$1.key" -subj "/CN=$2" -out "$1.csr" 2>/dev/null
  printf 'subjectAltName=%s\nextendedKeyUsage=serverAuth,clientAuth\nbasicConstraints=CA:FALSE\n' "$3" >"$1.ext"
  openssl x509 -req -in "$1.csr" -CA "$4.crt" -CAkey "$4.key" -set_serial "$5" -days 30 -extfile "$1.ext" \
    -out "$1.crt" 2>/dev/null
  rm -f "$1.csr" "$1.ext"
}
ca ca "ISN test CA"
ca other-ca "Another CA"
leaf server localhost "DNS:localhost,IP:127.0.0.1" ca 10
leaf agg isn-agg "DNS:localhost,IP:127.0.0.1,URI:spiffe://isn.test/isn-agg" ca 11
leaf client isn-query "URI:spiffe://isn.test/isn-query" ca 12
leaf stranger isn-query "URI:spiffe://isn.test/isn-query" other-ca 13
for n in $(seq 1 "${ROTATIONS:-0}"); do leaf "rotated-$n" localhost "DNS:localhost,IP:127.0.0.1" ca $((n + 100)); done

# openssl x509 cannot set past dates (3.0): `openssl ca` with an explicit validity can.
key expired.key
openssl req -new -key expired.key -subj "/CN=isn-query" -out expired.csr 2>/dev/null
mkdir -p ca-db
: >ca-db/index.txt
echo 20 >ca-db/serial
cat >ca-db/ca.cnf <<CNF
[ca]
default_ca = test
[test]
database = ca-db/index.txt
serial = ca-db/serial
new_certs_dir = ca-db
certificate = ca.crt
private_key = ca.key
default_md = sha256
policy = any
copy_extensions = none
[any]
commonName = supplied
CNF
openssl ca -batch -notext -config ca-db/ca.cnf -startdate 20200101000000Z -enddate 20200131000000Z \
  -in expired.csr -out expired.crt 2>/dev/null
rm -rf expired.csr ca-db
