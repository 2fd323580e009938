#!/usr/bin/env bash
# A private OpenLDAP slapd for tests, started by hand (no systemd, not the package's own
# directory): a throw-away slapd.conf and mdb database in $DIR, loaded offline.
#
# Usage (as root):  scripts/services/ldap.sh [install|start|stop|address|ldaps-address|ca]...
#                   (default: install start)
#   install  apt-get install slapd and ldap-utils if slapd is missing
#   start    write the directory below into $DIR, make a self-signed certificate for
#            127.0.0.1, and start slapd: ldap:// (StartTLS offered) on 127.0.0.1:$LDAP_PORT,
#            ldaps:// on 127.0.0.1:$LDAPS_PORT
#   stop     stop that slapd (by its PID)
#   address, ldaps-address   print host:port;  ca   print the certificate's path (PEM)
# Env: DIR (/tmp/drover-ldap), LDAP_PORT (38989), LDAPS_PORT (38990)
#
# Directory (base dc=example,dc=org):
#   cn=admin,dc=example,dc=org              the service bind, password adminpw
#   uid=lena,ou=staff,dc=example,dc=org     password lenapw, member of cn=schedulers
#   uid=otto,ou=staff,dc=example,dc=org     password ottopw, in no group
#   cn=schedulers,ou=groups,dc=example,dc=org   groupOfNames
set -euo pipefail

DIR=${DIR:-/tmp/drover-ldap}
LDAP_PORT=${LDAP_PORT:-38989}
LDAPS_PORT=${LDAPS_PORT:-38990}
BASE=dc=example,dc=org
export DEBIAN_FRONTEND=noninteractive

. "$(dirname "$0")/steps.sh"

do_install() {
  command -v slapd >/dev/null && command -v slappasswd >/dev/null && command -v ldapwhoami >/dev/null && return 0
  log "installing slapd"
  # Keep the package from building a directory of its own and from starting slapd.
  echo "slapd slapd/no_configuration boolean true" | debconf-set-selections
  apt_install --no-install-recommends slapd ldap-utils
  return 0
}

do_stop() {
  local pidfile="$DIR/slapd.pid" pid i
  [ -f "$pidfile" ] || return 0
  pid=$(cat "$pidfile")
  if kill -0 "$pid" 2>/dev/null && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = slapd ]; then
    kill "$pid"
    for i in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$pid" 2>/dev/null && kill -9 "$pid"
    log "stopped slapd (pid $pid)"
  fi
  rm -f "$pidfile"
}

do_start() {
  do_stop
  rm -rf "$DIR"; mkdir -p "$DIR/data" "$DIR/tls"
  openssl req -x509 -newkey rsa:2048 -nodes -days 30 -subj "/CN=127.0.0.1" \
    -addext "subjectAltName=IP:127.0.0.1,DNS:localhost" \
    -keyout "$DIR/tls/key.pem" -out "$DIR/tls/cert.pem" 2>/dev/null
  cat > "$DIR/slapd.conf" <<CONF
include /etc/ldap/schema/core.schema
include /etc/ldap/schema/cosine.schema
include /etc/ldap/schema/inetorgperson.schema
include /etc/ldap/schema/nis.schema
TLSCertificateFile $DIR/tls/cert.pem
TLSCertificateKeyFile $DIR/tls/key.pem
pidfile  $DIR/slapd.pid
argsfile $DIR/slapd.args
modulepath /usr/lib/ldap
moduleload back_mdb
database mdb
maxsize 104857600
suffix "$BASE"
rootdn "cn=admin,$BASE"
rootpw $(slappasswd -s adminpw)
directory $DIR/data
index objectClass eq
index uid,cn,member eq
access to attrs=userPassword
  by self write
  by anonymous auth
  by * none
access to *
  by users read
  by * none
CONF
  person() { # uid password uidNumber
    printf 'dn: uid=%s,ou=staff,%s\nobjectClass: inetOrgPerson\nobjectClass: posixAccount\nuid: %s\ncn: %s\nsn: Test\nuidNumber: %s\ngidNumber: %s\nhomeDirectory: /home/%s\nuserPassword: %s\n\n' \
      "$1" "$BASE" "$1" "$1" "$3" "$3" "$1" "$(slappasswd -s "$2")"
  }
  {
    printf 'dn: %s\nobjectClass: dcObject\nobjectClass: organization\no: Example\ndc: example\n\n' "$BASE"
    printf 'dn: ou=staff,%s\nobjectClass: organizationalUnit\nou: staff\n\n' "$BASE"
    printf 'dn: ou=groups,%s\nobjectClass: organizationalUnit\nou: groups\n\n' "$BASE"
    person lena lenapw 20001
    person otto ottopw 20002
    printf 'dn: cn=schedulers,ou=groups,%s\nobjectClass: groupOfNames\ncn: schedulers\nmember: uid=lena,ou=staff,%s\n\n' "$BASE" "$BASE"
  } > "$DIR/data.ldif"
  slaptest -Q -u -f "$DIR/slapd.conf"
  slapadd -q -f "$DIR/slapd.conf" -l "$DIR/data.ldif"
  if id openldap >/dev/null 2>&1; then chown -R openldap:openldap "$DIR"; fi
  local run_as=()
  id openldap >/dev/null 2>&1 && run_as=(-u openldap -g openldap)
  # Daemonizes; its PID goes to $DIR/slapd.pid.
  slapd -h "ldap://127.0.0.1:$LDAP_PORT/ ldaps://127.0.0.1:$LDAPS_PORT/" -f "$DIR/slapd.conf" "${run_as[@]}"
  local i
  for i in $(seq 1 100); do
    ldapwhoami -x -H "ldap://127.0.0.1:$LDAP_PORT" -D "cn=admin,$BASE" -w adminpw >/dev/null 2>&1 && break
    sleep 0.1
  done
  ldapwhoami -x -H "ldap://127.0.0.1:$LDAP_PORT" -D "uid=lena,ou=staff,$BASE" -w lenapw >/dev/null \
    || { log "slapd did not start"; exit 1; }
  log "slapd up on 127.0.0.1:$LDAP_PORT"
}

do_address() { echo "127.0.0.1:$LDAP_PORT"; }
do_ldaps_address() { echo "127.0.0.1:$LDAPS_PORT"; }
do_ca() { echo "$DIR/tls/cert.pem"; }

run_steps "$@"
