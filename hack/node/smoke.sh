#!/usr/bin/env bash
# A smoke test of a running real node (hack/node/node.sh start), run by hand:
#   hack/node/smoke.sh
# A busybox pod Running with an IP from the pod range; its log through the API server; a Service
# ClusterIP reachable from another pod (kube-proxy), and the `kubernetes` Service too; a memory-limited
# pod OOMKilled with exit 137; a deleted pod gone. Leaves nothing behind (its namespace is deleted).
# Busybox's wget segfaults here (Debian's static build), so HTTP goes through `nc`.
set -euo pipefail
DIR=${KH_NODE_DIR:-/run/kuberhealthy-realnode}
[ -f "$DIR/env" ] || { echo "smoke: no $DIR/env; run hack/node/node.sh start" >&2; exit 1; }
# shellcheck disable=SC1091
. "$DIR/env"
NS=kh-smoke-$$
k() { "$KUBECTL" --kubeconfig "$KUBECONFIG" --request-timeout=20s -n "$NS" "$@"; }
ok() { echo "ok   $*"; }
fail() { echo "FAIL $*"; k get pods -o wide || true; exit 1; }
phase_of() {  # phase_of POD SECONDS: wait for a final phase, print it
  local i p=
  for i in $(seq 1 $(($2 * 4))); do
    p=$(k get pod "$1" -o jsonpath='{.status.phase}' 2>/dev/null || true)
    case $p in Succeeded|Failed) break ;; esac
    sleep 0.25
  done
  echo "$p"
}
trap '"$KUBECTL" --kubeconfig "$KUBECONFIG" delete namespace "$NS" --wait=false >/dev/null 2>&1 || true' EXIT
"$KUBECTL" --kubeconfig "$KUBECONFIG" create namespace "$NS" >/dev/null
for i in $(seq 1 40); do k get serviceaccount default >/dev/null 2>&1 && break; sleep 0.25; done

pod() {  # pod NAME RESTART LIMIT COMMAND...
  local name=$1 restart=$2 limit=$3; shift 3
  local args; args=$(printf '"%s",' "$@"); args=${args%,}
  local res=; [ -n "$limit" ] && res="resources: {limits: {memory: $limit}}"
  k apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Pod
metadata: {name: $name, labels: {app: $name}}
spec:
  restartPolicy: $restart
  terminationGracePeriodSeconds: 2
  containers:
  - name: c
    image: $BUSYBOX_IMAGE
    imagePullPolicy: Never
    command: [$args]
    $res
EOF
}

T0=$(date +%s.%N)
pod web Always "" sh -c 'echo web-started; mkdir -p /www; echo served-by-web >/www/index.html; exec httpd -f -p 8080 -h /www'
k wait --for=condition=Ready pod/web --timeout=60s >/dev/null || fail "web pod not Ready"
IP=$(k get pod web -o jsonpath='{.status.podIP}')
ok "pod Running in $(echo "$(date +%s.%N) - $T0" | bc | cut -c1-4) s with IP $IP"
case $IP in 10.217.*) ok "pod IP $IP is in the pod range $POD_CIDR" ;; *) fail "pod IP $IP not in $POD_CIDR" ;; esac
for i in $(seq 1 20); do [ "$(k logs web 2>/dev/null)" = web-started ] && break; sleep 0.25; done
[ "$(k logs web)" = web-started ] && ok "kubectl logs through the API server: web-started" || fail "logs: $(k logs web)"

k expose pod web --port 80 --target-port 8080 --name web >/dev/null
SVC=$(k get service web -o jsonpath='{.spec.clusterIP}')
pod client Never "" sh -c "for i in 1 2 3 4 5 6 7 8 9 10; do printf 'GET / HTTP/1.0\r\n\r\n' | nc -w 2 $SVC 80 | grep -q served-by-web && break; sleep 0.5; done; printf 'GET / HTTP/1.0\r\n\r\n' | nc -w 2 $SVC 80 | tail -1; printf 'GET /version HTTP/1.0\r\n\r\n' | nc -w 2 $KUBERNETES_SERVICE_IP 443 >/dev/null && echo kubernetes-service-open"
[ "$(phase_of client 60)" = Succeeded ] || fail "client pod did not succeed"
OUT=$(k logs client)
echo "$OUT" | grep -q served-by-web && ok "Service $SVC:80 reached from a pod (kube-proxy)" || fail "Service: $OUT"
echo "$OUT" | grep -q kubernetes-service-open && ok "the kubernetes Service $KUBERNETES_SERVICE_IP:443 answers from a pod" || fail "kubernetes Service: $OUT"

pod oom Never 20Mi dd if=/dev/zero of=/dev/null bs=100M count=1
[ "$(phase_of oom 60)" = Failed ] || fail "oom pod did not fail"
R=$(k get pod oom -o jsonpath='{.status.containerStatuses[0].state.terminated.reason} {.status.containerStatuses[0].state.terminated.exitCode}')
[ "$R" = "OOMKilled 137" ] && ok "20Mi pod allocating 100Mi: $R" || fail "oom pod: $R"

T1=$(date +%s.%N)
k delete pod web --wait=false >/dev/null
for i in $(seq 1 240); do k get pod web >/dev/null 2>&1 || break; sleep 0.25; done
k get pod web >/dev/null 2>&1 && fail "web pod still there 60 s after delete"
ok "deleted pod gone after $(echo "$(date +%s.%N) - $T1" | bc | cut -c1-4) s"
echo "smoke: all ok"
