# Sourced by node.sh: the real node's host side effects, found, undone and checked.
# What a run changes outside its state dir: processes, iptables KUBE-* chains, mounts, the bridge,
# kubepods cgroups, a few hard-coded paths, sysctls. `cleanup` undoes all of it (stop, and start
# before anything else, for a crashed run); `leftovers` lists whatever is still there.
# Needs node.sh's variables (DIR, LOCK, SOCK, BIN, BRIDGE, the ranges, SYSCTLS, HOST_PATHS) and say().

# --- host side effects: cleaning up --------------------------------------------------------------------

# PIDs of everything we started: the PID files, containerd's shims (by our socket), the processes in
# the kubepods cgroups, and whatever still holds the node lock (only our daemons inherit it).
our_pids() {
  local f pid cg
  for f in "$DIR"/pids/*.pid; do
    [ -f "$f" ] || continue
    pid=$(cat "$f"); [ -n "$pid" ] && grep -qF "$DIR/" "/proc/$pid/cmdline" 2>/dev/null && echo "$pid"
  done
  # One grep and one find over /proc, not a process per fd: a crashed run can leave hundreds.
  # containerd's shims name our socket; clients (ctr, kubectl) of other people's scripts are not ours.
  for pid in $(grep -laFf <(echo "$SOCK") /proc/[0-9]*/cmdline 2>/dev/null | cut -d/ -f3); do
    case $(readlink "/proc/$pid/exe" 2>/dev/null) in */containerd-shim*) echo "$pid" ;; esac
  done
  find /proc/[0-9]*/fd -maxdepth 1 -lname "$LOCK" 2>/dev/null | cut -d/ -f3 || true
  for cg in /sys/fs/cgroup/*/kubepods; do
    [ -d "$cg" ] && find "$cg" -name cgroup.procs -exec cat {} + 2>/dev/null
  done
  true
}

kill_ours() {
  local pids i me
  # This script and its pipelines hold the lock too while starting: they share its process group,
  # whereas every daemon (and every container) runs in a session of its own.
  me=$(ps -o pgid= -p $$ | tr -d ' ')
  pids=$(for p in $(our_pids | sort -un); do
           [ "$(ps -o pgid= -p "$p" 2>/dev/null | tr -d ' ')" = "$me" ] || [ ! -d "/proc/$p" ] || echo "$p"
         done | tr '\n' ' ' || true)
  [ -z "${pids// /}" ] && return 0
  say "ending leftover processes: $pids"
  # shellcheck disable=SC2086
  kill -TERM $pids 2>/dev/null || true
  for i in $(seq 1 50); do
    pids=$(for p in $pids; do [ -d "/proc/$p" ] && ! grep -q '^State:.*Z' "/proc/$p/status" 2>/dev/null && echo "$p"; done | tr '\n' ' ' || true)
    [ -z "${pids// /}" ] && return 0
    sleep 0.2
  done
  # shellcheck disable=SC2086
  kill -KILL $pids 2>/dev/null || true
  sleep 0.5
}

umount_ours() {
  local m
  # Deepest first; a netns file, a tmpfs volume, an overlay rootfs, the kubelet root's bind mount.
  awk '{print $5}' /proc/self/mountinfo | sed 's/\\040/ /g' | \
    grep -E "^($DIR/|/var/lib/kubelet/|/run/netns/cni-|/run/containerd/)" | awk '{print length, $0}' | sort -rn | cut -d' ' -f2- | \
    while read -r m; do umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || say "cannot unmount $m"; done || true
  # The kubelet root is bind-mounted onto itself (its mountinfo entry is $DIR/kubelet, handled above).
  true
}

iptables_clean() {
  local ipt=$1 t rule chain
  command -v "$ipt" >/dev/null || return 0
  for t in filter nat mangle raw; do
    "$ipt" -w -t "$t" -S >/dev/null 2>&1 || continue
    # Jumps into KUBE-* chains from the built-in chains first, then the chains themselves.
    "$ipt" -w -t "$t" -S | grep -E '^-A [A-Z]+ .*-j KUBE-' | grep -Ev '^-A KUBE-' | while read -r rule; do
      eval "\"$ipt\" -w -t $t -D ${rule#-A }" 2>/dev/null || true
    done || true
    for chain in $("$ipt" -w -t "$t" -S | awk '$1=="-N" && $2 ~ /^KUBE-/ {print $2}'); do
      "$ipt" -w -t "$t" -F "$chain" 2>/dev/null || true
    done
    for chain in $("$ipt" -w -t "$t" -S | awk '$1=="-N" && $2 ~ /^KUBE-/ {print $2}'); do
      "$ipt" -w -t "$t" -X "$chain" 2>/dev/null || say "cannot delete $ipt -t $t $chain"
    done
  done
  return 0
}

restore_sysctls() {
  local k v
  [ -f "$DIR/host/sysctls" ] || return 0
  while read -r k v; do
    [ -n "$k" ] && sysctl -q -w "$k=$v" >/dev/null 2>&1 || say "cannot restore $k=$v"
  done <"$DIR/host/sysctls"
  rm -f "$DIR/host/sysctls"
}

# Undo every host side effect; used by stop and, before anything else, by start (a crashed run).
cleanup() {
  local cg p
  kill_ours
  if [ -x "$BIN/kube-proxy" ] && { iptables -w -t nat -S 2>/dev/null | grep -q '^-N KUBE-'; }; then
    "$BIN/kube-proxy" --cleanup >/dev/null 2>&1 || true   # exits 1 without IPVS support; rules go anyway
  fi
  iptables_clean iptables
  iptables_clean ip6tables
  umount_ours
  # Network namespaces live under containerd's state dir (netns_mounts_under_state_dir); unmounted
  # above, so their veths are gone with them. The bridge and the Service route go last.
  ip link show "$BRIDGE" >/dev/null 2>&1 && ip link delete "$BRIDGE"
  ip route show "$SERVICE_CIDR" 2>/dev/null | grep -q . && ip route delete "$SERVICE_CIDR" 2>/dev/null
  command -v conntrack >/dev/null && for p in "$POD_CIDR" "$SERVICE_CIDR"; do
    conntrack -D -s "$p" >/dev/null 2>&1 || true; conntrack -D -d "$p" >/dev/null 2>&1 || true
  done
  for cg in /sys/fs/cgroup/*/kubepods; do
    [ -d "$cg" ] && find "$cg" -depth -type d -exec rmdir {} \; 2>/dev/null
    [ -d "$cg" ] && say "cannot remove cgroup $cg"
  done
  if [ -f "$DIR/host/created" ]; then
    while read -r p; do [ -n "$p" ] && rm -rf "$p"; done <"$DIR/host/created"
    rm -f "$DIR/host/created"
  fi
  restore_sysctls
  # Keep the logs of the last run for a post-mortem; everything else in the state dir goes.
  if [ -d "$DIR" ]; then
    find "$DIR" -mindepth 1 -maxdepth 1 ! -name logs ! -name host -exec rm -rf {} + 2>/dev/null || true
  fi
  true
}

record_host_state() {
  local k p
  mkdir -p "$DIR/host"
  if [ ! -f "$DIR/host/sysctls" ]; then   # never overwrite the values a crashed run saved
    for k in $SYSCTLS; do
      [ -e "/proc/sys/${k//.//}" ] && echo "$k $(sysctl -n "$k")"
    done >"$DIR/host/sysctls.tmp"
    mv "$DIR/host/sysctls.tmp" "$DIR/host/sysctls"
  fi
  cp "$DIR/host/sysctls" "$DIR/host/sysctls.last"
  for p in $HOST_PATHS; do
    [ -e "$p" ] || echo "$p"
  done >>"$DIR/host/created"
  sort -u -o "$DIR/host/created" "$DIR/host/created"
  cp "$DIR/host/created" "$DIR/host/created.last"
}

# --- leftovers: what stop must have undone ---------------------------------------------------------------

leftovers() {  # prints every host side effect still present; exit 1 if any
  local bad=0 k v cur t n
  say_bad() { echo "LEFT: $*"; bad=1; }
  for t in filter nat mangle raw; do
    n=$(iptables -w -t "$t" -S 2>/dev/null | grep -c KUBE- || true); [ "$n" = 0 ] || say_bad "iptables -t $t: $n KUBE- lines"
    n=$(ip6tables -w -t "$t" -S 2>/dev/null | grep -c KUBE- || true); [ "$n" = 0 ] || say_bad "ip6tables -t $t: $n KUBE- lines"
  done
  n=$(awk '{print $5}' /proc/self/mountinfo | grep -cE "^($DIR/|/var/lib/kubelet|/run/netns/|/run/containerd)" || true)
  [ "$n" = 0 ] || say_bad "$n mounts under $DIR, /var/lib/kubelet, /run/netns or /run/containerd"
  ip link show "$BRIDGE" >/dev/null 2>&1 && say_bad "bridge $BRIDGE"
  n=$(ip -o link show type veth 2>/dev/null | wc -l); [ "$n" = 0 ] || say_bad "$n veth interfaces"
  [ -z "$(ip netns list 2>/dev/null)" ] || say_bad "network namespaces: $(ip netns list | tr '\n' ' ')"
  for t in /sys/fs/cgroup/*/kubepods; do [ -d "$t" ] && say_bad "cgroup $t"; done
  for t in $HOST_PATHS; do grep -qx "$t" "$DIR/host/created.last" 2>/dev/null && [ -e "$t" ] && say_bad "$t"; done
  if [ -f "$DIR/host/sysctls.last" ]; then
    while read -r k v; do
      cur=$(sysctl -n "$k" 2>/dev/null); [ "$cur" = "$v" ] || say_bad "sysctl $k=$cur (was $v)"
    done <"$DIR/host/sysctls.last"
  fi
  n=$(our_pids | sort -u | wc -l); [ "$n" = 0 ] || say_bad "$n processes: $(our_pids | sort -u | tr '\n' ' ')"
  [ -e "$DIR/env" ] && say_bad "$DIR/env"
  exec 7>>"$LOCK"; flock -n 7 || say_bad "$LOCK is held"; exec 7>&-
  [ "$bad" = 0 ] && echo "clean: no KUBE- chains, mounts, bridge, veths, netns, kubepods cgroups, processes; sysctls restored"
  return "$bad"
}

