#!/usr/bin/env bash
# Makes the certificates of the mTLS overlay with openssl: a CA, Typha's server certificate
# (CN typha-server, serverAuth) and the client certificate calico-node presents
# (CN typha-client, clientAuth), the common names Calico's operator uses.  Usage:
#   bash deploy/certs.sh [DIR]      (default deploy/components/mtls/certs; never commit them)
set -euo pipefail
dir=${1:-deploy/components/mtls/certs}
days=${CERT_DAYS:-365}
mkdir -p "$dir"
cd "$dir"
umask 077
openssl req -x509 -newkey rsa:2048 -nodes -sha256 -days "$days" \
  -keyout ca.key -out ca.crt -subj "/CN=trio-typha-ca" \
  -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign"
issue() {  # name CN extendedKeyUsage
  openssl req -newkey rsa:2048 -nodes -sha256 -keyout "$1.key" -out "$1.csr" -subj "/CN=$2"
  printf 'basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=%s\nsubjectAltName=DNS:%s\n' \
    "$3" "$2" > "$1.ext"
  openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -sha256 \
    -days "$days" -extfile "$1.ext" -out "$1.crt"
  rm -f "$1.csr" "$1.ext"
}
issue typha-server typha-server serverAuth
issue typha-client typha-client clientAuth
rm -f ca.srl
chmod 0644 ./*.crt
echo "certificates in $dir: ca.crt, typha-server.{crt,key}, typha-client.{crt,key}" >&2
