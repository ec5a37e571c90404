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
#   hack/image.sh base [ARCH]   make (or reuse) the Debian-made base; prints BASE_IMAGE=<name>. ARCH (a
#                               Debian architecture, default the host's): arm64 makes it with mmdebstrap
#                               --arch=arm64, its package scripts run under qemu-user-static (binfmt below).
#   hack/image.sh binfmt [ARCH...]  let this machine run ARCH's binaries (default arm64): install
#                               qemu-user-static, binfmt-support and arch-test with apt, mount binfmt_misc,
#                               register qemu with the F flag (so it also works inside containers), then
#                               run arch-test. Prints BINFMT=<arches> or SKIP=<the precise reason>; exit 0.
#   hack/image.sh multiarch [LIST] [PLATFORMS]  `make image-multiarch`: build the Dockerfile once per
#                               platform (podman --platform; PLATFORMS default linux/amd64,linux/arm64) into
#                               the manifest list LIST (default localhost/kuberhealthy-python:<version>),
#                               each image also tagged LIST-<arch>; prints PLATFORM_IMAGE=<platform>=<tag>
#                               lines. BASE_IMAGE=debian: each platform on its own Debian-made base;
#                               BASE_IMAGE=<registry image>: that image's variant for the platform.
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

host_arch() { dpkg --print-architecture 2>/dev/null || case "$(uname -m)" in x86_64) echo amd64 ;; aarch64) echo arm64 ;; *) uname -m ;; esac; }

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

# --- other architectures: qemu-user-static through binfmt_misc ------------------------------------------

BINFMT_DIR=/proc/sys/fs/binfmt_misc

qemu_name() {  # the qemu-user name of a Debian architecture
  case "$1" in
    amd64) echo x86_64 ;; arm64) echo aarch64 ;; armhf|armel) echo arm ;; i386) echo i386 ;;
    ppc64el) echo ppc64le ;; riscv64) echo riscv64 ;; s390x) echo s390x ;; mips64el) echo mips64el ;;
    *) return 1 ;;
  esac
}

# The kernel opens the interpreter of an entry with the F flag when it is registered, so a container (whose
# root has no qemu) can run the architecture's binaries too: podman build's RUN steps need that.
binfmt_flags() { sed -n 's/^flags: *//p' "$1" 2>/dev/null; }

binfmt_register() {  # binfmt_register QEMU_NAME: from Debian's binfmt.d line (F flag), else update-binfmts
  local q=$1 conf=/usr/lib/binfmt.d/qemu-$1.conf line
  if [ -e "$BINFMT_DIR/qemu-$q" ] && [[ "$(binfmt_flags "$BINFMT_DIR/qemu-$q")" != *F* ]]; then
    say "qemu-$q is registered without the F flag: registering it again with F"
    echo -1 | $SUDO tee "$BINFMT_DIR/qemu-$q" >/dev/null
  fi
  [ -e "$BINFMT_DIR/qemu-$q" ] && return 0
  if [ -s "$conf" ]; then
    line=$(grep -v '^[#;]' "$conf" | grep -m1 .)
    [[ "${line##*:}" == *F* ]] || line="${line}F"
    printf '%s' "$line" | $SUDO tee "$BINFMT_DIR/register" >/dev/null 2>&1 && return 0
  fi
  $SUDO update-binfmts --enable "qemu-$q" >/dev/null 2>&1 || true
}

cmd_binfmt() {  # cmd_binfmt [ARCH...]; one line on stdout: BINFMT=<arches> or SKIP=<reason>
  local arch need=() q log missing=()
  for arch in "${@:-arm64}"; do
    [ "$arch" = "$(host_arch)" ] && continue
    qemu_name "$arch" >/dev/null || { echo "SKIP=no qemu-user emulator is known for the architecture $arch"; return 0; }
    need+=("$arch")
  done
  if [ ${#need[@]} = 0 ]; then echo "BINFMT=native"; return 0; fi
  for arch in "${need[@]}"; do command -v "qemu-$(qemu_name "$arch")-static" >/dev/null || missing+=(qemu-user-static); done
  command -v update-binfmts >/dev/null || missing+=(binfmt-support)
  command -v arch-test >/dev/null || missing+=(arch-test)
  if [ ${#missing[@]} -gt 0 ]; then
    if [ -n "$SUDO" ] && ! sudo -n true 2>/dev/null; then
      echo "SKIP=qemu-user-static, binfmt-support and arch-test are not installed and cannot be (not root, no sudo)"
      return 0
    fi
    say "apt-get install qemu-user-static binfmt-support arch-test"
    log=$(mktemp)
    if ! { $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq \
             -o DPkg::Lock::Timeout=300 --no-install-recommends qemu-user-static binfmt-support arch-test; } \
           >"$log" 2>&1; then
      echo "SKIP=apt-get could not install qemu-user-static, binfmt-support and arch-test: $(tail -2 "$log" | tr '\n' ' ')"
      rm -f "$log"; return 0
    fi
    rm -f "$log"
  fi
  if [ ! -e "$BINFMT_DIR/register" ]; then
    if ! grep -qw binfmt_misc /proc/filesystems; then
      echo "SKIP=this kernel has no binfmt_misc (CONFIG_BINFMT_MISC unset, and no module loaded): it cannot hand a foreign binary to qemu"
      return 0
    fi
    if ! log=$($SUDO mount -t binfmt_misc binfmt_misc "$BINFMT_DIR" 2>&1); then
      echo "SKIP=binfmt_misc is in the kernel but 'mount -t binfmt_misc binfmt_misc $BINFMT_DIR' failed ($log): mounting it needs CAP_SYS_ADMIN (root, or a --privileged container), and a seccomp or AppArmor profile may forbid it"
      return 0
    fi
  fi
  if [ "$(cat "$BINFMT_DIR/status" 2>/dev/null)" != enabled ]; then
    echo 1 | $SUDO tee "$BINFMT_DIR/status" >/dev/null 2>&1 || true
  fi
  for arch in "${need[@]}"; do
    q=$(qemu_name "$arch")
    binfmt_register "$q"
    if [ ! -e "$BINFMT_DIR/qemu-$q" ]; then
      echo "SKIP=binfmt_misc is mounted but the kernel refused to register qemu-$q (writing $BINFMT_DIR/register failed: is it read-only in this sandbox?)"
      return 0
    fi
    if [[ "$(binfmt_flags "$BINFMT_DIR/qemu-$q")" != *F* ]]; then
      echo "SKIP=qemu-$q is registered without the F flag and could not be registered again: containers would not find the interpreter"
      return 0
    fi
    if [ "$(arch-test "$arch" 2>&1)" != "$arch: ok" ]; then
      echo "SKIP=qemu-$q is registered ($(head -1 "$BINFMT_DIR/qemu-$q")) but arch-test $arch fails: $(arch-test "$arch" 2>&1 | head -1)"
      return 0
    fi
  done
  echo "BINFMT=${need[*]}"
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

# The key of a base made for the host's architecture is what it always was (a cached base stays valid);
# another architecture's key has the architecture in it too.
base_key() {  # base_key ARCH
  { printf '%s\n' "$SUITE" "$MIRROR" "$SECURITY_MIRROR" "${MM_ARGS[@]}"
    [ "$1" = "$(host_arch)" ] || echo "--arch=$1"; } | sha256sum | cut -c1-10
}

# The architecture a cached base tarball was made for: debian-<suite>[-<arch>]-<key>.tar.
tar_arch() {
  local name=${1##*/debian-}; name=${name%.tar}; name=${name%-*}
  case "$name" in
    *-amd64|*-arm64|*-armhf|*-armel|*-i386|*-ppc64el|*-riscv64|*-s390x|*-mips64el) echo "${name##*-}" ;;
    *) host_arch ;;
  esac
}

# The tarball is imported with podman (buildah has no import), into podman's storage, or into the
# private one when KH_IMAGE_PRIVATE is set.
cmd_base() {  # cmd_base [ARCH]
  local key tag tar eng=podman lock arch=${1:-$(host_arch)} sfx="" foreign=()
  have_tools || { say "podman, runc and mmdebstrap are needed: run 'bash hack/image.sh tools'"; exit 1; }
  if [ "$arch" != "$(host_arch)" ]; then
    sfx=-$arch
    foreign=(--arch="$arch")
  fi
  key=$(base_key "$arch")
  tag=localhost/kuberhealthy-base:$SUITE$sfx-$key
  tar=$ROOT/image-base/debian-$SUITE$sfx-$key.tar
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
      if [ -n "$sfx" ]; then  # the packages' scripts run in the new tree: under qemu
        local can; can=$(cmd_binfmt "$arch")
        case "$can" in SKIP=*) say "no $arch base: ${can#SKIP=}"; exit 1 ;; esac
      fi
      say "mmdebstrap $SUITE ${sfx:+($arch) }(python3, python3-venv) -> $tar"
      local t0=$SECONDS log=$ROOT/image-base/mmdebstrap$sfx.log
      mmdebstrap --mode=auto --format=tar "${foreign[@]}" "${MM_ARGS[@]}" "$SUITE" "$tar.tmp" \
        "deb $MIRROR $SUITE main" "deb $MIRROR $SUITE-updates main" \
        "deb $SECURITY_MIRROR $SUITE-security main" >"$log" 2>&1 \
        || { tail -20 "$log" >&2; rm -f "$tar.tmp"; exit 1; }
      mv "$tar.tmp" "$tar"
      say "base${sfx:+ ($arch)} made in $((SECONDS - t0)) s"
      local old  # bases of the same architecture made with other settings
      for old in "$ROOT"/image-base/debian-*.tar; do
        [ "$old" = "$tar" ] && continue
        if [ ! -e "$old" ] || [ "$(tar_arch "$old")" != "$arch" ]; then continue; fi
        rm -f "$old"
        old=${old##*/debian-}; old=${old%.tar}
        "$eng" rmi "localhost/kuberhealthy-base:$old" >/dev/null 2>&1 || true  # kept while still in use
      done
    fi
    "$eng" import --arch "$arch" --os linux --change 'CMD ["python3"]' \
      --change "LABEL org.opencontainers.image.description=Debian $SUITE python3 ($arch), made with mmdebstrap" \
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

# The build's arguments for engine $1 on base $2 (empty: the Dockerfile's), into the array `args`.
build_args() {
  local eng=$1 base=$2 ca rev
  args=(--build-arg "VERSION=$(version)")
  if rev=$(git -C "$REPO" rev-parse --short HEAD 2>/dev/null); then args+=(--build-arg "REVISION=$rev"); fi
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
}

cmd_build() {
  local tag=${1:-kuberhealthy-python:$(version)} eng base=${BASE_IMAGE:-} t0 size args=()
  eng=$(pick_engine)
  if [ "$base" = debian ]; then
    [ "$eng" = podman ] || { say "BASE_IMAGE=debian needs podman (KH_IMAGE_ENGINE=podman)"; exit 1; }
    base=$(cmd_base | sed -n 's/^BASE_IMAGE=//p')
  fi
  build_args "$eng" "$base"
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

# One image per platform, each on its platform's base, all in one manifest list. podman only: its
# manifest lists push as an OCI image index (`podman manifest push --all --format oci`, release/build.py).
cmd_multiarch() {
  local list=${1:-localhost/kuberhealthy-python:$(version)} platforms=${2:-${KH_IMAGE_PLATFORMS:-linux/amd64,linux/arm64}}
  local base=${BASE_IMAGE:-} p arch foreign=() can t0 t1 args=() pbase tag
  case "${KH_IMAGE_ENGINE:-podman}" in
    podman) command -v podman >/dev/null || { say "multiarch needs podman: run 'bash hack/image.sh tools'"; exit 1; } ;;
    *) say "multiarch builds with podman only (KH_IMAGE_ENGINE=podman)"; exit 1 ;;
  esac
  for p in ${platforms//,/ }; do
    case "$p" in linux/*) ;; *) say "platform $p: only linux/<arch> platforms"; exit 1 ;; esac
    arch=${p#linux/}; arch=${arch%%/*}
    [ "$arch" = "$(host_arch)" ] || foreign+=("$arch")
  done
  if [ ${#foreign[@]} -gt 0 ]; then
    can=$(cmd_binfmt "${foreign[@]}")
    case "$can" in SKIP=*) say "cannot build for ${foreign[*]}: ${can#SKIP=}"; exit 1 ;; esac
  fi
  if podman manifest inspect "$list" >/dev/null 2>&1; then
    podman manifest rm "$list" >/dev/null  # a list of an earlier build: start afresh
  elif podman image exists "$list"; then
    say "$list is an image, not a manifest list: not replacing it"; exit 1
  fi
  t0=$SECONDS
  for p in ${platforms//,/ }; do
    arch=${p#linux/}; arch=${arch%%/*}
    pbase=$base
    if [ "$base" = debian ]; then pbase=$(cmd_base "$arch" | sed -n 's/^BASE_IMAGE=//p'); fi
    build_args podman "$pbase"
    case "$pbase" in localhost/*|"") ;; *) args+=(--pull=always) ;; esac  # the platform's variant of the name
    tag=$list-$arch
    say "podman build --platform $p ${pbase:+(base $pbase) }-> $tag, in $list"
    t1=$SECONDS
    if [ -n "${KH_IMAGE_PRIVATE:-}" ]; then
      # Tags that keep this platform's layers (both stages) through the tests' clean-up. The builder stage
      # first: the whole build then reuses its layers (the other way round, the builder ran twice).
      podman build "${args[@]}" --platform "$p" --target builder \
        -t "localhost/kuberhealthy-python:layer-cache-builder-$arch" "$REPO" >/dev/null 2>&1 || true
    fi
    podman build "${args[@]}" --platform "$p" --manifest "$list" -t "$tag" "$REPO" \
      || { [ -n "$pbase" ] || say "no registry reachable for the default base? try BASE_IMAGE=debian"; exit 1; }
    say "built $tag in $((SECONDS - t1)) s"
    if [ -n "${KH_IMAGE_PRIVATE:-}" ]; then podman tag "$tag" "localhost/kuberhealthy-python:layer-cache-$arch"; fi
    echo "PLATFORM_IMAGE=$p=$tag"
  done
  say "built $list ($platforms) in $((SECONDS - t0)) s"
}

if [ -n "${KH_IMAGE_PRIVATE:-}" ]; then case "${1:-}" in build|base|multiarch) private_env ;; esac; fi
case "${1:-}" in
  build) shift; cmd_build "$@" ;;
  multiarch) shift; cmd_multiarch "$@" ;;
  tools) cmd_tools ;;
  probe) cmd_probe ;;
  env) cmd_env ;;
  base) shift; cmd_base "$@" ;;
  binfmt) shift; cmd_binfmt "$@" ;;
  *) sed -n '2,32p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
