#!/usr/bin/env bash
# A real single-node Kubernetes 1.20.2 on this machine: real pods in containerd, for tests/e2e.
#
#   hack/node/node.sh build    build kubelet, kube-scheduler, kube-proxy, kubectl from the cached Debian
#                              1.20.2 tree (hack/testbed/build-apiserver.sh), apt-install containerd, runc,
#                              CNI plugins, iptables, conntrack, busybox-static; make the pause and busybox
#                              images. Idempotent; a warm cache does nothing.
#   hack/node/node.sh start    clean what a crashed run left, record the sysctls, then start etcd,
#                              kube-apiserver, kube-controller-manager, kube-scheduler, containerd, kubelet
#                              and kube-proxy on a bridge of our own. Writes $KH_NODE_DIR/env last.
#                              A node already running from the same $KH_NODE_DIR and healthy: no-op.
#   hack/node/node.sh stop     delete every pod, stop everything, undo every host side effect, restore the
#                              sysctls. Safe to run at any time (also after a crash, or twice).
#   hack/node/node.sh status   what runs; exit 0 when the node is up and Ready.
#   hack/node/node.sh leftovers  after stop: every host side effect still present; exit 1 if any.
#
# Root only. Why it is built like this (see testbed/README.md, "A real node"):
# - No systemd and no registry: every daemon is a child started here with its own config, root, state
#   and socket; images are made locally (hack/node/mkimage.sh) and loaded with `ctr images import`.
#   containerd gets HTTPS_PROXY=127.0.0.1:9 so a pull of an image that is not there fails at once
#   instead of reaching out (traffic may only go to this machine and to our pods).
# - root here lacks CAP_SYS_RESOURCE: containerd's CRI needs restrict_oom_score_adj = true, or every
#   sandbox fails with "can't get final child's PID from pipe: EOF".
# - Pods and Services get ranges of their own (not 127/8, which is a pod's own loopback). The API
#   server and kubelet bind the bridge's gateway address, which exists before them; the Service range
#   is routed onto the bridge, so an unknown ClusterIP never leaves the machine.
# - One real node per machine: kubelet and containerd hard-code some paths. $LOCK is taken by start
#   and inherited by every daemon, so it is held exactly as long as anything of ours runs.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
ROOT=${KH_TESTBED_DIR:-$HOME/.cache/kuberhealthy-testbed}
CACHE=$ROOT/k8s-v1.20.2
BIN=$CACHE/bin
DIR=${KH_NODE_DIR:-/run/kuberhealthy-realnode}
LOCK=/run/kuberhealthy-realnode.lock
OPLOCK=/run/kuberhealthy-realnode.op.lock
IMAGES=$CACHE/node-images
NODE_NAME=${KH_NODE_NAME:-kh-realnode}
BRIDGE=khnode0
POD_CIDR=10.217.0.0/16
NODE_IP=10.217.0.1
SERVICE_CIDR=10.218.0.0/16
KUBERNETES_SVC_IP=10.218.0.1
API_PORT=6443
ETCD_PORT=22379; ETCD_PEER=22380
TOKEN=kh-realnode-admin-token
PAUSE_IMAGE=localhost/kh-node/pause:1
BUSYBOX_IMAGE=localhost/kh-node/busybox:1
SOCK=$DIR/containerd/containerd.sock
KUBECTL=$BIN/kubectl
# Everything the kubelet or kube-proxy may change, restored by stop (kernel.panic=10 and route_localnet=1
# are not what a host should keep).
SYSCTLS="net.ipv4.ip_forward net.ipv4.conf.all.route_localnet net.bridge.bridge-nf-call-iptables
net.bridge.bridge-nf-call-ip6tables vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops
kernel.keys.root_maxkeys kernel.keys.root_maxbytes net.netfilter.nf_conntrack_max
net.netfilter.nf_conntrack_tcp_timeout_established net.netfilter.nf_conntrack_tcp_timeout_close_wait"
# Paths outside $DIR that kubelet 1.20 and containerd 1.6 hard-code: removed on stop if we created them.
HOST_PATHS="/var/lib/kubelet /var/log/pods /var/log/containers /run/containerd /var/lib/cni /run/netns"
DAEMONS="etcd apiserver kcm scheduler containerd kubelet proxy"

say() { echo "node: [$SECONDS s] $*" >&2; }
die() { say "$*"; exit 1; }
need_root() { [ "$(id -u)" = 0 ] || die "must run as root"; }
kc() { "$KUBECTL" --kubeconfig "$DIR/kubeconfig" --request-timeout=20s "$@"; }

# --- build ---------------------------------------------------------------------------------------------

apt_install() {
  local missing=() p
  for p in "$@"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
  [ ${#missing[@]} -eq 0 ] && return 0
  say "apt-get install ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

build() {
  need_root
  apt_install containerd runc containernetworking-plugins iptables conntrack ipset busybox-static gcc libc6-dev \
    etcd-server openssl
  # Debian's containerd package enables a systemd unit; there is no systemd here, so nothing starts.
  local want=() b
  [ -x "$BIN/kube-apiserver" ] && [ -x "$BIN/kube-controller-manager" ] || bash "$REPO/hack/testbed/setup.sh" >/dev/null
  for b in kube-apiserver kube-controller-manager kubelet kube-scheduler kube-proxy kubectl; do
    [ -x "$BIN/$b" ] || want+=("$b")
  done
  [ ${#want[@]} -eq 0 ] || KH_CACHE=$CACHE bash "$REPO/hack/testbed/build-apiserver.sh" "${want[@]}"
  make_images
}

make_images() {
  mkdir -p "$IMAGES"
  local src=$HERE/pause.c root
  if [ ! -s "$IMAGES/pause.tar" ] || [ "$src" -nt "$IMAGES/pause.tar" ]; then
    root=$(mktemp -d)
    gcc -static -Os -s -o "$root/pause" "$src"
    bash "$HERE/mkimage.sh" "$root" "$PAUSE_IMAGE" "$IMAGES/pause.tar" '["/pause"]'
    rm -rf "$root"
  fi
  if [ ! -s "$IMAGES/busybox.tar" ]; then
    root=$(mktemp -d)
    mkdir -p "$root/bin" "$root/tmp" "$root/etc"
    cp /bin/busybox "$root/bin/busybox"
    "$root/bin/busybox" --install -s "$root/bin"   # symlinks to /bin/busybox, relative to the rootfs
    # --install wrote absolute links into $root/bin pointing at $root/bin/busybox: point them at /bin/busybox.
    find "$root/bin" -type l -exec ln -sf /bin/busybox {} \;
    echo 'root:x:0:0:root:/:/bin/sh' >"$root/etc/passwd"; echo 'root:x:0:' >"$root/etc/group"
    chmod 1777 "$root/tmp"
    bash "$HERE/mkimage.sh" "$root" "$BUSYBOX_IMAGE" "$IMAGES/busybox.tar" null '["sh"]'
    rm -rf "$root"
  fi
}

missing_build() {
  local b
  for b in kube-apiserver kube-controller-manager kubelet kube-scheduler kube-proxy kubectl; do
    [ -x "$BIN/$b" ] || { echo "$BIN/$b"; return; }
  done
  for b in containerd ctr containerd-shim-runc-v2 runc iptables conntrack etcd; do
    command -v "$b" >/dev/null || { echo "$b"; return; }
  done
  [ -x /usr/lib/cni/bridge ] && [ -x /usr/lib/cni/host-local ] && [ -x /usr/lib/cni/loopback ] || { echo /usr/lib/cni; return; }
  [ -s "$IMAGES/pause.tar" ] && [ -s "$IMAGES/busybox.tar" ] || echo "$IMAGES/{pause,busybox}.tar"
}

# shellcheck source=hack/node/host.sh
. "$HERE/host.sh"

# --- start ---------------------------------------------------------------------------------------------

spawn() {  # spawn NAME ARGV... : a daemon in a session of its own; inherits fd 9 (the node lock)
  local name=$1; shift
  # cwd is the state dir: the kubelet leaves an empty file named "oom" in its working directory.
  (cd "$DIR" && exec setsid "$@") >"$DIR/logs/$name.log" 2>&1 </dev/null 8>&- &
  echo $! >"$DIR/pids/$name.pid"
}

alive() { local f=$DIR/pids/$1.pid; [ -f "$f" ] && kill -0 "$(cat "$f")" 2>/dev/null; }

wait_for() {  # wait_for SECONDS WHAT DAEMON COMMAND...
  local limit=$1 what=$2 daemon=$3 t0=$SECONDS; shift 3
  until "$@" >/dev/null 2>&1; do
    if [ -n "$daemon" ] && ! alive "$daemon"; then
      tail -n 30 "$DIR/logs/$daemon.log" >&2; die "$daemon exited while waiting for $what"
    fi
    [ $((SECONDS - t0)) -lt "$limit" ] || { [ -z "$daemon" ] || tail -n 30 "$DIR/logs/$daemon.log" >&2; die "no $what after ${limit}s"; }
    sleep 0.2
  done
}

# shellcheck source=hack/node/config.sh
. "$HERE/config.sh"

start_node() {
  local t0=$SECONDS
  write_configs
  # The bridge and its gateway address first: the API server and kubelet bind it.
  ip link add "$BRIDGE" type bridge
  ip addr add "$NODE_IP/16" dev "$BRIDGE"
  ip link set "$BRIDGE" up
  ip route add "$SERVICE_CIDR" dev "$BRIDGE" src "$NODE_IP"
  sysctl -q -w net.ipv4.ip_forward=1 net.bridge.bridge-nf-call-iptables=1 >/dev/null

  spawn etcd etcd --name realnode --data-dir "$DIR/etcd" \
    --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls "http://127.0.0.1:$ETCD_PEER" --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER" \
    --initial-cluster "realnode=http://127.0.0.1:$ETCD_PEER" --initial-cluster-state new
  wait_for 30 "etcd health" etcd curl -sf "http://127.0.0.1:$ETCD_PORT/health"

  # An audit log of every request but watches, at Metadata level (verb, resource, user agent, source
  # address): bench/node_bench.py counts the daemon's requests in it. In the state dir: stop removes it.
  mkdir -p "$DIR/audit"
  printf '%s\n' 'apiVersion: audit.k8s.io/v1' 'kind: Policy' 'omitStages: ["RequestReceived"]' 'rules:' \
    '- level: None' '  verbs: ["watch"]' '- level: Metadata' >"$DIR/audit/policy.yaml"
  spawn apiserver "$BIN/kube-apiserver" --etcd-servers="http://127.0.0.1:$ETCD_PORT" \
    --bind-address="$NODE_IP" --advertise-address="$NODE_IP" --secure-port=$API_PORT \
    --cert-dir="$DIR/certs" --token-auth-file="$DIR/tokens.csv" --authorization-mode=RBAC \
    --service-account-issuer=https://kubernetes.default.svc.cluster.local \
    --service-account-key-file="$DIR/sa.pub" --service-account-signing-key-file="$DIR/sa.key" \
    --service-cluster-ip-range="$SERVICE_CIDR" --allow-privileged=true --profiling=false \
    --kubelet-preferred-address-types=InternalIP \
    --audit-policy-file="$DIR/audit/policy.yaml" --audit-log-path="$DIR/audit/audit.log" \
    --audit-log-maxsize=200 --audit-log-maxbackup=1
  wait_for 90 "API server /readyz" apiserver curl -sfk -H "Authorization: Bearer $TOKEN" "https://$NODE_IP:$API_PORT/readyz"

  spawn kcm "$BIN/kube-controller-manager" --kubeconfig="$DIR/kubeconfig" --port=0 --secure-port=0 \
    --leader-elect=false --controllers='*' --service-account-private-key-file="$DIR/sa.key" \
    --root-ca-file="$DIR/certs/apiserver.crt"
  spawn scheduler "$BIN/kube-scheduler" --kubeconfig="$DIR/kubeconfig" --leader-elect=false \
    --port=0 --secure-port=0
  # No registry is reachable and none may be tried: a pull goes to a closed local port and fails at once.
  spawn containerd env HTTPS_PROXY=http://127.0.0.1:9 HTTP_PROXY=http://127.0.0.1:9 NO_PROXY= \
    containerd --config "$DIR/containerd/config.toml"
  wait_for 30 "containerd socket" containerd ctr -a "$SOCK" version
  ctr -a "$SOCK" -n k8s.io images import "$IMAGES/pause.tar" >/dev/null
  ctr -a "$SOCK" -n k8s.io images import "$IMAGES/busybox.tar" >/dev/null

  spawn kubelet "$BIN/kubelet" --config="$DIR/kubelet.yaml" --kubeconfig="$DIR/kubeconfig" \
    --container-runtime=remote --container-runtime-endpoint="unix://$SOCK" \
    --root-dir="$DIR/kubelet" --cert-dir="$DIR/kubelet-pki" --hostname-override="$NODE_NAME" \
    --node-ip="$NODE_IP" --pod-infra-container-image="$PAUSE_IMAGE" --v=1
  spawn proxy "$BIN/kube-proxy" --kubeconfig="$DIR/kubeconfig" --hostname-override="$NODE_NAME" \
    --proxy-mode=iptables --cluster-cidr="$POD_CIDR" --nodeport-addresses="$NODE_IP/32" \
    --healthz-bind-address="$NODE_IP:10256" --metrics-bind-address=127.0.0.1:10249 \
    --conntrack-max-per-core=0 --conntrack-tcp-timeout-established=0 --conntrack-tcp-timeout-close-wait=0

  wait_for 90 "node $NODE_NAME Ready" kubelet kc wait --for=condition=Ready "node/$NODE_NAME" --timeout=5s
  wait_for 60 "the default ServiceAccount" kcm kc get serviceaccount default -n default
  wait_for 60 "kube-proxy rules for the kubernetes Service" proxy \
    sh -c "iptables -w -t nat -S KUBE-SERVICES | grep -q '$KUBERNETES_SVC_IP/32'"
  for p in scheduler; do alive $p || { tail -n 30 "$DIR/logs/$p.log" >&2; die "$p exited"; }; done

  cat >"$DIR/env.tmp" <<EOF
KUBECONFIG=$DIR/kubeconfig
API_URL=https://$NODE_IP:$API_PORT
NODE_NAME=$NODE_NAME
NODE_IP=$NODE_IP
POD_CIDR=$POD_CIDR
SERVICE_CIDR=$SERVICE_CIDR
KUBERNETES_SERVICE_IP=$KUBERNETES_SVC_IP
CONTAINERD_SOCK=$SOCK
KUBECTL=$KUBECTL
CTR=$(command -v ctr)
PAUSE_IMAGE=$PAUSE_IMAGE
BUSYBOX_IMAGE=$BUSYBOX_IMAGE
ADMIN_TOKEN=$TOKEN
SA_KEY=$DIR/sa.key
CA_FILE=$DIR/certs/apiserver.crt
AUDIT_LOG=$DIR/audit/audit.log
EOF
  mv "$DIR/env.tmp" "$DIR/env"
  say "up in $((SECONDS - t0)) s: $DIR/env"
}

healthy() {
  local d
  [ -f "$DIR/env" ] || return 1
  for d in $DAEMONS; do alive "$d" || return 1; done
  kc get --raw /readyz >/dev/null 2>&1
}

start() {
  need_root
  local missing; missing=$(missing_build)
  [ -z "$missing" ] || die "not built: $missing (run hack/node/node.sh build)"
  exec 8>"$OPLOCK"; flock -w 600 8 || die "another start/stop is still running"
  exec 9>>"$LOCK"
  if ! flock -n 9; then
    if [ "$(cat "$LOCK.dir" 2>/dev/null)" = "$DIR" ] && healthy; then
      say "already running ($DIR/env)"; exit 0
    fi
    [ "$(cat "$LOCK.dir" 2>/dev/null)" = "$DIR" ] || die "a real node from $(cat "$LOCK.dir" 2>/dev/null) holds $LOCK: stop it first"
    say "a broken run of this node holds the lock: stopping it first"
    exec 9>&-
    stop_node
    exec 9>>"$LOCK"; flock -n 9 || die "$LOCK is still held after stop"
  fi
  echo "$DIR" >"$LOCK.dir"
  mkdir -p "$DIR"
  cleanup        # what a crashed run left: processes, iptables, mounts, netns, cgroups, sysctls
  rm -rf "$DIR/logs"; mkdir -p "$DIR/logs"
  record_host_state
  trap 'rc=$?; if [ $rc != 0 ]; then say "start failed; logs in $DIR/logs; cleaning up"; exec 9>&-; stop_node || true; fi' EXIT
  start_node
  trap - EXIT
}

# --- stop ----------------------------------------------------------------------------------------------

stop_daemon() {  # stop_daemon NAME [GRACE_SECONDS]
  local f=$DIR/pids/$1.pid pid i
  [ -f "$f" ] || return 0
  pid=$(cat "$f")
  if kill -0 "$pid" 2>/dev/null && grep -qF "$DIR/" "/proc/$pid/cmdline" 2>/dev/null; then
    local t0=$SECONDS
    kill -TERM "$pid" 2>/dev/null || true
    for i in $(seq 1 $((${2:-10} * 10))); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null && say "$1 ignored SIGTERM for ${2:-10} s: killed"
    [ $((SECONDS - t0)) -lt 3 ] || say "$1 took $((SECONDS - t0)) s to stop"
  fi
  rm -f "$f"
}

stop_node() {
  local i n t0=$SECONDS
  rm -f "$DIR/env"
  if alive apiserver && alive kubelet && kc get --raw /readyz >/dev/null 2>&1; then
    # Nothing may make new pods while we delete them; the kubelet then tears each down properly
    # (CNI DEL, netns, volumes), which leaves no shims or veths behind.
    stop_daemon kcm; stop_daemon scheduler
    kc delete pods --all --all-namespaces --grace-period=1 --wait=false >/dev/null 2>&1 || true
    # The kubelet stops containers and sandboxes (CNI DEL, netns) within seconds but keeps the API
    # objects ~20 s for volume clean-up: once no task runs and no netns is left, the rest is ours.
    for i in $(seq 1 150); do
      n=$(kc get pods --all-namespaces --no-headers 2>/dev/null | wc -l) || n=1
      [ "$n" = 0 ] && break
      if [ "$i" -gt 5 ] && ! ctr -a "$SOCK" -n k8s.io tasks ls 2>/dev/null | grep -q RUNNING \
         && ! grep ' - nsfs ' /proc/self/mountinfo | awk '{print $5}' | grep -q "^$DIR/"; then
        say "$n pods deleted, their containers and sandboxes gone"; n=0; break
      fi
      sleep 0.4
    done
    [ "$n" = 0 ] || say "$n pods still there after 60 s: forcing"
  fi
  say "pods done"
  stop_daemon proxy; stop_daemon kubelet
  say "kubelet and kube-proxy stopped"
  if alive containerd; then
    local c
    for c in $(ctr -a "$SOCK" -n k8s.io tasks ls -q 2>/dev/null); do
      ctr -a "$SOCK" -n k8s.io tasks kill -s SIGKILL "$c" >/dev/null 2>&1 || true
    done
    sleep 0.5
    for c in $(ctr -a "$SOCK" -n k8s.io tasks ls -q 2>/dev/null); do
      ctr -a "$SOCK" -n k8s.io tasks delete -f "$c" >/dev/null 2>&1 || true
    done
    for c in $(ctr -a "$SOCK" -n k8s.io containers ls -q 2>/dev/null); do
      ctr -a "$SOCK" -n k8s.io containers delete "$c" >/dev/null 2>&1 || true
    done
  fi
  stop_daemon containerd; stop_daemon kcm; stop_daemon scheduler; stop_daemon apiserver; stop_daemon etcd 20
  say "daemons stopped"
  cleanup
  rm -f "$LOCK.dir"
  exec 9>>"$LOCK"
  if ! flock -n 9; then
    kill_ours; flock -n 9 || say "$LOCK is still held: $(our_pids | sort -u | tr '\n' ' ')"
  fi
  exec 9>&-
  say "stopped in $((SECONDS - t0)) s"
}

stop() {
  need_root
  exec 8>"$OPLOCK"; flock -w 600 8 || die "another start/stop is still running"
  [ -z "$(cat "$LOCK.dir" 2>/dev/null)" ] || [ "$(cat "$LOCK.dir")" = "$DIR" ] || \
    die "the running real node is $(cat "$LOCK.dir"), not $DIR"
  stop_node
}

# --- status --------------------------------------------------------------------------------------------

status() {
  local d up=0
  for d in $DAEMONS; do
    if alive "$d"; then
      printf '%-11s running  pid %-7s rss %s KiB\n' "$d" "$(cat "$DIR/pids/$d.pid")" "$(ps -o rss= -p "$(cat "$DIR/pids/$d.pid")" | tr -d ' ')"
      up=$((up + 1))
    else
      printf '%-11s stopped\n' "$d"
    fi
  done
  if [ -f "$DIR/env" ] && kc get nodes --no-headers 2>/dev/null; then
    echo "pods: $(kc get pods --all-namespaces --no-headers 2>/dev/null | wc -l)"
    echo "env:  $DIR/env"
    [ "$up" = 7 ] && return 0
  fi
  return 1
}

case "${1:-}" in
  build) build ;;
  start) start ;;
  stop) stop ;;
  status) status ;;
  leftovers) leftovers ;;
  images) make_images ;;
  *) echo "usage: $0 {build|start|stop|status}" >&2; exit 2 ;;
esac
