#!/usr/bin/env bash
# On a fresh Debian 12 machine (as root),
# install the dependencies, build the `outbound` command line, start a
# throw-away nginx on 127.0.0.1 that serves a few JSON routes, and call it
# with `outbound request`. Stops nginx on exit. No arguments.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

bash scripts/install-deps.sh
TARGET=outbound_cli bash scripts/build.sh
cli="$root/build/outbound"

prefix=$(mktemp -d /tmp/outbound-quickstart.XXXXXX)
nginx_pid=
cleanup() {
  if [[ -n "$nginx_pid" ]] && kill -0 "$nginx_pid" 2>/dev/null; then
    kill -QUIT "$nginx_pid" 2>/dev/null || true
    wait "$nginx_pid" 2>/dev/null || true
  fi
  rm -rf "$prefix"
}
trap cleanup EXIT

mkdir -p "$prefix/html/v1" "$prefix/logs" "$prefix/tmp"
printf '%s\n' '{"greeting":"hello from nginx","served_by":"outbound quickstart","items":[1,2,3]}' \
  > "$prefix/html/v1/hello.json"

write_conf() { # port
  cat > "$prefix/nginx.conf" <<CONF
daemon off;
master_process off;
pid $prefix/nginx.pid;
error_log $prefix/logs/error.log;
events { worker_connections 64; }
http {
  access_log $prefix/logs/access.log;
  client_body_temp_path $prefix/tmp/body;
  proxy_temp_path $prefix/tmp/proxy;
  fastcgi_temp_path $prefix/tmp/fastcgi;
  uwsgi_temp_path $prefix/tmp/uwsgi;
  scgi_temp_path $prefix/tmp/scgi;
  types { application/json json; }
  default_type application/json;
  server {
    listen 127.0.0.1:$1;
    root $prefix/html;
    location = /v1/hello.json { }
    location = /v1/unavailable { return 503 '{"detail":"down for maintenance"}'; }
    location / { return 404 '{"detail":"no such route"}'; }
  }
}
CONF
}

port_in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

nginx_bin=$(command -v nginx || echo /usr/sbin/nginx)
port=
for _ in $(seq 1 20); do
  candidate=$(( 20000 + RANDOM % 40000 ))
  port_in_use "$candidate" && continue
  write_conf "$candidate"
  "$nginx_bin" -p "$prefix/" -c "$prefix/nginx.conf" -e "$prefix/logs/error.log" &
  nginx_pid=$!
  for _ in $(seq 1 50); do
    if port_in_use "$candidate"; then port=$candidate; break; fi
    kill -0 "$nginx_pid" 2>/dev/null || break
    sleep 0.1
  done
  [[ -n "$port" ]] && break
  kill "$nginx_pid" 2>/dev/null || true
  wait "$nginx_pid" 2>/dev/null || true
  nginx_pid=
done
if [[ -z "$port" ]]; then
  echo "quickstart: nginx did not start:" >&2
  cat "$prefix/logs/error.log" >&2 || true
  exit 1
fi
base="http://127.0.0.1:$port"
echo
echo "quickstart: nginx serves $base (prefix $prefix)"

failures=0
run() { # expected exit code, args...
  local expect=$1; shift
  echo
  echo "\$ outbound $*"
  local rc=0
  "$cli" "$@" || rc=$?
  echo "(exit code $rc, expected $expect)"
  [[ $rc -eq $expect ]] || failures=$((failures + 1))
}

# 1. A JSON GET: the body on stdout, exit 0.
run 0 request "$base/v1/hello.json"
# 2. --raw: status, headers and body, exit 0 whatever the status.
run 0 request --raw "$base/v1/nope"
# 3. A 503 made retryable, with the observer events on stderr: three
#    attempts, then a server_error line on stderr and exit code 5.
run 5 request --verbose --retry-status 503 --max-attempts 3 \
  --base-backoff 0.05 "$base/v1/unavailable"

echo
if [[ $failures -eq 0 ]]; then
  echo "quickstart: ok: outbound called nginx on $base (3 calls as expected)"
else
  echo "quickstart: $failures call(s) did not end as expected" >&2
  exit 1
fi
