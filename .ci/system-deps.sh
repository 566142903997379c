#!/usr/bin/env bash
# Debian packages some tests drive for real: chromium (the query UI browser test), nginx (the load
# balancer of the cluster test, and `nginx -t` in the compose check), and python3-zeep with
# python3-xmlsec (zeep, the Python SOAP client partners sign with: test/soap/zeep.test.ts runs it through
# /usr/bin/python3, not whichever python3 is first on PATH), docker-compose (`config -q` validates
# docker-compose.yml; no engine needed) and prometheus (its promtool checks and unit-tests the alert rules
# of deploy/prometheus/ and parses the dashboard's queries; the server itself is not run) and systemd's
# systemd-analyze (verifies the host recipe's unit; nothing is started by systemd). Installed when missing, if this
# user can (root with apt-get); otherwise says what to install. Used by `npm test` (pretest) and .ci/run.
set -u
missing=()
[ -x /usr/bin/chromium ] || missing+=(chromium)
command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ] || missing+=(nginx)
/usr/bin/python3 -c 'import zeep, xmlsec' >/dev/null 2>&1 || missing+=(python3-zeep python3-xmlsec)
command -v docker-compose >/dev/null 2>&1 || missing+=(docker-compose)
command -v promtool >/dev/null 2>&1 || missing+=(prometheus)
command -v systemd-analyze >/dev/null 2>&1 || missing+=(systemd)
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "installing Debian packages for the tests: ${missing[*]}"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null && exit 0
fi
echo "warning: ${missing[*]} missing and not installable here (apt-get install ${missing[*]}); the tests that drive them will fail" >&2
exit 0
