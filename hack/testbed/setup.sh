#!/usr/bin/env bash
# Idempotent set-up of the local test bed: a real kube-apiserver (+ kube-controller-manager) and etcd.
#
# This machine kind has no Docker and reaches only PyPI, Debian and npm, so the control plane is built
# offline from Debian bookworm's `kubernetes` 1.20 source package with Debian's Go, and etcd comes from
# Debian's etcd-server. Binaries are cached in $KH_TESTBED_DIR/k8s-v1.20.2/bin (default
# ~/.cache/kuberhealthy-testbed); a second run with the cache present does nothing.
#
# Users who already have control-plane binaries (envtest, a distro package) set KUBE_APISERVER and ETCD
# to their paths and skip the build entirely.
#
# Usage: hack/testbed/setup.sh            (prints the resolved paths last, as KEY=VALUE lines)
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
K8S_VERSION=v1.20.2
ROOT=${KH_TESTBED_DIR:-$HOME/.cache/kuberhealthy-testbed}
CACHE=$ROOT/k8s-$K8S_VERSION
BIN=$CACHE/bin
SUDO=; [ "$(id -u)" = 0 ] || SUDO=sudo
mkdir -p "$BIN"

apt_install() {
  local missing=()
  for p in "$@"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
  [ ${#missing[@]} -eq 0 ] && return 0
  echo "== apt-get install ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# etcd: from $ETCD, else Debian's etcd-server.
if [ -z "${ETCD:-}" ]; then
  command -v etcd >/dev/null 2>&1 || apt_install etcd-server
  ETCD=$(command -v etcd)
fi
apt_install openssl curl

need_build=()
if [ -z "${KUBE_APISERVER:-}" ]; then
  [ -x "$BIN/kube-apiserver" ] || need_build+=(kube-apiserver)
  KUBE_APISERVER=$BIN/kube-apiserver
fi
if [ -z "${KUBE_CONTROLLER_MANAGER:-}" ]; then
  [ -x "$BIN/kube-controller-manager" ] || [ -n "${KH_SKIP_KCM:-}" ] || need_build+=(kube-controller-manager)
  KUBE_CONTROLLER_MANAGER=$BIN/kube-controller-manager
fi

if [ ${#need_build[@]} -gt 0 ]; then
  if [ -z "$(apt-cache showsrc kubernetes 2>/dev/null)" ]; then
    echo "== adding a deb-src entry for bookworm"
    $SUDO tee /etc/apt/sources.list.d/kh-debsrc.sources >/dev/null <<'SRC'
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
    $SUDO apt-get update -qq
  fi
  apt_install golang-go golang-github-modern-go-reflect2-dev dpkg-dev
  cd "$CACHE"
  if ! ls -d kubernetes-1.20*/ >/dev/null 2>&1; then
    echo "== apt-get source kubernetes"
    apt-get source -qq kubernetes 2>&1 | grep -v unsandboxed || true
  fi
  KH_CACHE=$CACHE "$HERE/build-apiserver.sh" "${need_build[@]}"
fi

echo "KUBE_APISERVER=$KUBE_APISERVER"
echo "KUBE_CONTROLLER_MANAGER=$KUBE_CONTROLLER_MANAGER"
echo "ETCD=$ETCD"
