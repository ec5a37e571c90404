# Sourced by node.sh: the real node's configuration files, written into the state dir at each start
# (service-account keys, the admin token and kubeconfig, the CNI conflist, containerd's and the
# kubelet's configs, the pods' resolv.conf). Why each setting is there is said beside it.
# Needs node.sh's variables (DIR, SOCK, BRIDGE, NODE_IP, POD_CIDR, API_PORT, TOKEN, PAUSE_IMAGE).

write_configs() {
  local d=$DIR
  mkdir -p "$d"/{pids,logs,certs,etcd,kubelet,kubelet-pki,cni/net.d,cni-ipam,containerd/root,containerd/state,runc}
  chmod 700 "$d/etcd"
  openssl genrsa -out "$d/sa.key" 2048 2>/dev/null
  openssl rsa -in "$d/sa.key" -pubout -out "$d/sa.pub" 2>/dev/null
  echo "$TOKEN,admin,admin-uid,\"system:masters\"" >"$d/tokens.csv"
  cat >"$d/kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: realnode
  cluster: {server: "https://$NODE_IP:$API_PORT", insecure-skip-tls-verify: true}
users:
- name: admin
  user: {token: $TOKEN}
contexts:
- name: realnode
  context: {cluster: realnode, user: admin, namespace: default}
current-context: realnode
EOF
  cat >"$d/cni/net.d/10-khnode.conflist" <<EOF
{"cniVersion": "0.4.0", "name": "khnode", "plugins": [
  {"type": "bridge", "bridge": "$BRIDGE", "isGateway": true, "ipMasq": false, "hairpinMode": true,
   "ipam": {"type": "host-local", "dataDir": "$d/cni-ipam",
            "ranges": [[{"subnet": "$POD_CIDR", "gateway": "$NODE_IP", "rangeStart": "10.217.0.10"}]],
            "routes": [{"dst": "0.0.0.0/0"}]}}]}
EOF
  cat >"$d/containerd/config.toml" <<EOF
version = 2
root = "$d/containerd/root"
state = "$d/containerd/state"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs"]
[grpc]
  address = "$SOCK"
[ttrpc]
  address = "$SOCK.ttrpc"
[debug]
  address = ""
[metrics]
  address = ""
[plugins."io.containerd.internal.v1.opt"]
  path = "$d/containerd/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_IMAGE"
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  disable_apparmor = true
  enable_selinux = false
  max_container_log_line_size = 16384
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = "$(command -v runc)"
        Root = "$d/runc"
        SystemdCgroup = false
  # Registries: a certs.d/<host:port>/hosts.toml per registry (e.g. a plain-HTTP one, the release
  # rehearsal's: release/rehearse.py writes it). Read at each pull, so it may be written while we run.
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = "$d/containerd/certs.d"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$d/cni/net.d"
    max_conf_num = 1
EOF
  cat >"$d/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $NODE_IP
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
authentication: {anonymous: {enabled: true}, webhook: {enabled: false}}
authorization: {mode: AlwaysAllow}
cgroupDriver: cgroupfs
failSwapOn: false
# Local images are all there is: never collect them, never evict for disk.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: "50Mi", nodefs.available: "1%", imagefs.available: "1%", nodefs.inodesFree: "1%"}
kubeAPIQPS: 50
kubeAPIBurst: 100
serializeImagePulls: false
hairpinMode: hairpin-veth
maxPods: 110
podCIDR: $POD_CIDR
clusterDomain: cluster.local
# No cluster DNS here, and a pod must not query the host's resolver (traffic stays on this machine):
# pods get a resolver on their own loopback, where nothing answers.
resolvConf: $d/resolv.conf
EOF
  printf 'nameserver 127.0.0.1\noptions ndots:1 timeout:1 attempts:1\n' >"$d/resolv.conf"
}
