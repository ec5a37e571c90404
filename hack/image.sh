#!/usr/bin/env bash
# The daemon image: build it with whatever engine exists, and make a base from Debian packages where no
# container registry is reachable.
#
#   hack/image.sh build [TAG]   `make image`: docker (with a running daemon), podman or buildah, in that
#                               order (KH_IMAGE_ENGINE=docker|podman|buildah picks one). The base is
#                               $BASE_IMAGE (default: the Dockerfile's, python:3.11-slim); BASE_IMAGE=debian
#                               builds on the Debian-made base below (podman only). TAG defaults to
#                               kuberhealthy-python:<version>. KH_IMAGE_PRIVATE=1: the private storage.
#   hack/image.sh tools         install podman, runc and mmdebstrap with apt when missing (as root, or with
#                               sudo); says why and exits 0 when it cannot, so `make test` goes on.
#   hack/image.sh probe         can containers run here? Prints ENGINE=<path> or SKIP=<reason>; exit 0.
#   hack/image.sh env           the project-private engine settings (KEY=VALUE lines) the image tests use.
#   hack/image.sh base          make (or reuse) the Debian-made base; prints BASE_IMAGE=<name>.
#
# The image tests (`make image-test`, part of `make test`) use podman with a private configuration and
# storage under $KH_TESTBED_DIR/containers (default ~/.cache/kuberhealthy-testbed), so the base image and
# the layer cache survive between runs and nothing touches the machine's own container set-up. On this
# machine kind the runtime is runc (not crun), and a container's open-files and processes limits must not
# exceed the host's hard limits (no CAP_SYS_RESOURCE): the private configuration sets them.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/.." && pwd)
ROOT=${KH_TESTBED_DIR:-$HOME/.cache/kuberhealthy-testbed}
STORE=$ROOT/containers
SUDO=; [ "$(id -u)" = 0 ] || SUDO=sudo
SUITE=${KH_IMAGE_BASE_SUITE:-bookworm}
MIRROR=${KH_IMAGE_BASE_MIRROR:-http://deb.debian.org/debian}
SECURITY_MIRROR=${KH_IMAGE_BASE_SECURITY_MIRROR:-http://deb.debian.org/debian-security}
BASE_MAX_AGE_DAYS=${KH_IMAGE_BASE_MAX_AGE_DAYS:-30}   # remade after this, for security updates

say() { echo "image: $*" >&2; }

version() { sed -n 's/^ *version="\([^"]*\)".*/\1/p' "$REPO/setup.py" | head -1; }

# Limits for containers (and build steps): at most the host's hard limits, which an unprivileged
# runtime cannot raise.
limit() {  # limit <ulimit flag> <cap>
  local hard; hard=$(ulimit -H "$1")
  if [ "$hard" = unlimited ] || [ "$hard" -gt "$2" ]; then echo "$2"; else echo "$hard"; fi
}
NOFILE=$(limit -n 65536)
NPROC=$(limit -u 32768)
ULIMITS=(--ulimit "nofile=$NOFILE:$NOFILE" --ulimit "nproc=$NPROC:$NPROC")

# A CA bundle for pip inside the build, for networks whose TLS is inspected by a proxy (this one's is).
ca_bundle() {
  local f
  for f in "${KH_BUILD_CA_BUNDLE:-}" "${PIP_CERT:-}" /etc/ssl/certs/ca-certificates.crt; do
    if [ -n "$f" ] && [ -s "$f" ]; then echo "$f"; return; fi
  done
}

oci_runtime() { command -v runc || command -v crun || true; }

# --- the private engine configuration --------------------------------------------------------------------

private_env() {
  local runroot driver
  if [ "$(id -u)" = 0 ]; then runroot=/run/kuberhealthy-testbed-containers
  else runroot=${XDG_RUNTIME_DIR:-/tmp}/kuberhealthy-testbed-containers-$(id -u); fi
  # overlay where the kernel has it; vfs (slower, copies each layer) everywhere else.
  if grep -qw overlay /proc/filesystems 2>/dev/null; then driver=overlay; else driver=vfs; fi
  mkdir -p "$STORE/storage" "$runroot"
  cat >"$STORE/storage.conf.new" <<EOF
# Written by hack/image.sh: the image tests' own storage, kept between runs.
[storage]
driver = "$driver"
graphroot = "$STORE/storage"
runroot = "$runroot"
EOF
  cat >"$STORE/containers.conf.new" <<EOF
# Written by hack/image.sh for the image tests.
[containers]
default_ulimits = ["nofile=$NOFILE:$NOFILE", "nproc=$NPROC:$NPROC"]
netns = "host"
[engine]
cgroup_manager = "cgroupfs"
events_logger = "file"
runtime = "$(basename "$(oci_runtime)" 2>/dev/null || echo runc)"
tmp_dir = "$runroot/libpod"
EOF
  cat >"$STORE/registries.conf.new" <<'EOF'
# Written by hack/image.sh: no registry is searched for short names; the tests never pull.
unqualified-search-registries = []
EOF
  local f
  for f in storage containers registries; do  # atomically, as parallel test runs may read them
    if cmp -s "$STORE/$f.conf.new" "$STORE/$f.conf"; then rm -f "$STORE/$f.conf.new"
    else mv -f "$STORE/$f.conf.new" "$STORE/$f.conf"; fi
  done
  export CONTAINERS_STORAGE_CONF=$STORE/storage.conf CONTAINERS_CONF=$STORE/containers.conf
  export CONTAINERS_REGISTRIES_CONF=$STORE/registries.conf
}

# --- tools -----------------------------------------------------------------------------------------------

have_tools() { command -v podman >/dev/null && command -v mmdebstrap >/dev/null && [ -n "$(oci_runtime)" ]; }

cmd_tools() {
  have_tools && return 0
  if [ -n "$SUDO" ] && ! sudo -n true 2>/dev/null; then
    say "SKIP: podman/runc/mmdebstrap are missing and cannot be installed (not root, no sudo)"
    return 0
  fi
  if ! command -v apt-get >/dev/null; then
    say "SKIP: podman/runc/mmdebstrap are missing and there is no apt-get to install them"
    return 0
  fi
  say "apt-get install podman runc mmdebstrap"
  local log; log=$(mktemp)
  if ! { $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq \
           --no-install-recommends podman runc mmdebstrap; } >"$log" 2>&1; then
    tail -5 "$log" >&2
    say "SKIP: apt-get could not install podman, runc and mmdebstrap"
  fi
  rm -f "$log"
  return 0
}

# Skip only for what no configuration can fix: no engine, or no way to isolate a container.
cmd_probe() {
  if ! have_tools; then
    echo "SKIP=no container engine: podman, runc (or crun) and mmdebstrap are not installed and could not be (run 'bash hack/image.sh tools' as root)"
    return 0
  fi
  if [ "$(id -u)" != 0 ] && ! unshare --user --map-root-user true 2>/dev/null; then
    echo "SKIP=not root and user namespaces are unavailable: podman cannot isolate a container here"
    return 0
  fi
  if ! unshare --mount --pid --fork --ipc --uts true 2>/dev/null && [ "$(id -u)" = 0 ]; then
    echo "SKIP=this kernel or sandbox refuses new mount/pid namespaces: no container can run here"
    return 0
  fi
  echo "ENGINE=$(command -v podman)"
}

cmd_env() {
  private_env
  echo "CONTAINERS_STORAGE_CONF=$CONTAINERS_STORAGE_CONF"
  echo "CONTAINERS_CONF=$CONTAINERS_CONF"
  echo "CONTAINERS_REGISTRIES_CONF=$CONTAINERS_REGISTRIES_CONF"
  echo "NOFILE=$NOFILE"
  echo "NPROC=$NPROC"
}

# --- the Debian-made base ----------------------------------------------------------------------------------

# Debian's python3 with venv, CA certificates and useradd; no apt, no perl, no docs or translations.
# shellcheck disable=SC2054  # the commas belong to --include
MM_ARGS=(--variant=essential --include=python3,python3-venv,ca-certificates,passwd
         --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr
         '--dpkgopt=path-exclude=/usr/share/man/*' '--dpkgopt=path-exclude=/usr/share/info/*'
         '--dpkgopt=path-exclude=/usr/share/locale/*' --dpkgopt=path-include=/usr/share/locale/locale.alias
         '--dpkgopt=path-exclude=/usr/share/doc/*' '--dpkgopt=path-include=/usr/share/doc/*/copyright'
         --aptopt='Acquire::Languages "none"' --aptopt='Acquire::Retries "5"')

base_key() {
  printf '%s\n' "$SUITE" "$MIRROR" "$SECURITY_MIRROR" "${MM_ARGS[@]}" | sha256sum | cut -c1-10
}

# The tarball is imported with podman (buildah has no import), into podman's storage, or into the
# private one when KH_IMAGE_PRIVATE is set.
cmd_base() {
  local key tag tar eng=podman lock
  have_tools || { say "podman, runc and mmdebstrap are needed: run 'bash hack/image.sh tools'"; exit 1; }
  key=$(base_key)
  tag=localhost/kuberhealthy-base:$SUITE-$key
  tar=$ROOT/image-base/debian-$SUITE-$key.tar
  mkdir -p "$ROOT/image-base"
  lock=$ROOT/image-base/.lock
  exec 9>"$lock"
  flock 9   # one maker at a time; the others then find the image
  if [ -s "$tar" ] && [ -n "$(find "$tar" -mtime +"$BASE_MAX_AGE_DAYS" 2>/dev/null)" ]; then
    say "the Debian-made base is older than $BASE_MAX_AGE_DAYS days: making it again"
    rm -f "$tar"
    "$eng" rmi -f "$tag" >/dev/null 2>&1 || true
  fi
  if ! "$eng" image exists "$tag" 2>/dev/null; then
    if [ ! -s "$tar" ]; then
      say "mmdebstrap $SUITE (python3, python3-venv) -> $tar"
      local t0=$SECONDS
      mmdebstrap --mode=auto --format=tar "${MM_ARGS[@]}" "$SUITE" "$tar.tmp" \
        "deb $MIRROR $SUITE main" "deb $MIRROR $SUITE-updates main" \
        "deb $SECURITY_MIRROR $SUITE-security main" >"$ROOT/image-base/mmdebstrap.log" 2>&1 \
        || { tail -20 "$ROOT/image-base/mmdebstrap.log" >&2; rm -f "$tar.tmp"; exit 1; }
      mv "$tar.tmp" "$tar"
      say "base made in $((SECONDS - t0)) s"
      local old  # bases made with other settings
      for old in "$ROOT"/image-base/debian-*.tar; do
        [ "$old" = "$tar" ] && continue
        rm -f "$old"
        old=${old##*/debian-}; old=${old%.tar}
        "$eng" rmi "localhost/kuberhealthy-base:$old" >/dev/null 2>&1 || true  # kept while still in use
      done
    fi
    "$eng" import --change 'CMD ["python3"]' \
      --change "LABEL org.opencontainers.image.description=Debian $SUITE python3, made with mmdebstrap" \
      "$tar" "$tag" >/dev/null
  fi
  exec 9>&-
  echo "BASE_IMAGE=$tag"
}

# --- build -------------------------------------------------------------------------------------------------

pick_engine() {
  case "${KH_IMAGE_ENGINE:-}" in
    docker|podman|buildah) command -v "$KH_IMAGE_ENGINE" >/dev/null || { say "$KH_IMAGE_ENGINE not found"; exit 1; }
                           echo "$KH_IMAGE_ENGINE"; return ;;
    "") ;;
    *) say "KH_IMAGE_ENGINE must be docker, podman or buildah"; exit 1 ;;
  esac
  if command -v docker >/dev/null && docker info >/dev/null 2>&1; then echo docker; return; fi
  if command -v podman >/dev/null; then echo podman; return; fi
  if command -v buildah >/dev/null; then echo buildah; return; fi
  say "no container engine: install Docker, or run 'bash hack/image.sh tools' (podman) and try again"
  exit 1
}

cmd_build() {
  local tag=${1:-kuberhealthy-python:$(version)} eng base=${BASE_IMAGE:-} ca t0 size rev
  eng=$(pick_engine)
  local args=(--build-arg "VERSION=$(version)")
  if rev=$(git -C "$REPO" rev-parse --short HEAD 2>/dev/null); then args+=(--build-arg "REVISION=$rev"); fi
  if [ "$base" = debian ]; then
    [ "$eng" = podman ] || { say "BASE_IMAGE=debian needs podman (KH_IMAGE_ENGINE=podman)"; exit 1; }
    base=$(cmd_base | sed -n 's/^BASE_IMAGE=//p')
  fi
  if [ -n "$base" ]; then args+=(--build-arg "BASE_IMAGE=$base"); fi
  ca=$(ca_bundle)
  if [ -n "$ca" ]; then args+=(--secret "id=ca-bundle,src=$ca"); fi
  case "$eng" in
    docker) ;;
    podman) args+=(--network host --force-rm --layers "${ULIMITS[@]}")
            case "$base" in localhost/*) args+=(--pull=never) ;; esac ;;
    buildah) args+=(--network host --force-rm --layers "${ULIMITS[@]}")
             case "$base" in localhost/*) args+=(--pull-never) ;; esac ;;
  esac
  say "$eng build ${base:+(base $base) }-> $tag"
  t0=$SECONDS
  local rc=0
  if [ "$eng" = buildah ]; then buildah bud "${args[@]}" -t "$tag" "$REPO" || rc=$?
  else "$eng" build "${args[@]}" -t "$tag" "$REPO" || rc=$?; fi
  if [ "$rc" != 0 ]; then
    [ -n "$base" ] || say "no registry reachable for the default base? try: make image BASE_IMAGE=debian"
    exit "$rc"
  fi
  if [ -n "${KH_IMAGE_PRIVATE:-}" ] && [ "$eng" = podman ]; then
    # Tags that keep the newest build's layers (both stages) through the tests' clean-up, so an
    # unchanged tree builds from cache next time. The builder stage is all cached here: about a second.
    "$eng" tag "$tag" localhost/kuberhealthy-python:layer-cache >/dev/null
    "$eng" build "${args[@]}" --target builder -t localhost/kuberhealthy-python:layer-cache-builder "$REPO" \
      >/dev/null 2>&1 || true
  fi
  size=$("$eng" image inspect --format '{{.Size}}' "$tag" 2>/dev/null || echo 0)
  say "built $tag in $((SECONDS - t0)) s, $((size / 1000000)) MB"
}

if [ -n "${KH_IMAGE_PRIVATE:-}" ]; then case "${1:-}" in build|base) private_env ;; esac; fi
case "${1:-}" in
  build) shift; cmd_build "$@" ;;
  tools) cmd_tools ;;
  probe) cmd_probe ;;
  env) cmd_env ;;
  base) cmd_base ;;
  *) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
