#!/usr/bin/env bash
# Installs everything outbound's build and tests need on Debian 12.
# Skips apt entirely when every package is already installed.
set -euo pipefail

packages=(
  cmake g++ make ccache
  libcaf-dev libboost1.81-dev libboost-json1.81-dev prometheus-cpp-dev
  libssl-dev libgtest-dev libgmock-dev libcli11-dev
  nginx openssl ca-certificates
  prometheus
  etcd-server
  clang-14 libclang-rt-14-dev libfuzzer-14-dev
)

missing=()
for p in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  [[ "$status" == "install ok installed" ]] || missing+=("$p")
done

if [[ ${#missing[@]} -eq 0 ]]; then
  echo "install-deps: all ${#packages[@]} packages already installed"
  exit 0
fi

sudo=()
if [[ $(id -u) -ne 0 ]]; then
  command -v sudo >/dev/null || { echo "install-deps: run as root (missing: ${missing[*]})" >&2; exit 1; }
  sudo=(sudo)
fi

echo "install-deps: installing ${missing[*]}"
"${sudo[@]}" apt-get update
"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${packages[@]}"
# The nginx package starts a system-wide server on port 80; the tests and the
# quickstart run their own instances on loopback, so stop it if it was started
# by this install (ignore machines without systemd / service).
if [[ " ${missing[*]} " == *" nginx "* ]]; then
  "${sudo[@]}" service nginx stop >/dev/null 2>&1 || true
fi
# Same for prometheus (its server on :9090): the tests only need promtool.
if [[ " ${missing[*]} " == *" prometheus "* ]]; then
  "${sudo[@]}" service prometheus stop >/dev/null 2>&1 || true
fi
# And for etcd-server (a system-wide member on 127.0.0.1:2379/2380): the
# integration tests start their own etcd on free ports.
if [[ " ${missing[*]} " == *" etcd-server "* ]]; then
  "${sudo[@]}" service etcd stop >/dev/null 2>&1 || true
fi
echo "install-deps: done"
