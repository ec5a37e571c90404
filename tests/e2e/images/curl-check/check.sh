#!/bin/sh
# A Kuberhealthy v2-style checker: one POST with curl and no kh-run-uuid header, as v2's own clients
# send it, so the daemon must find the run by the pod's source address. MODE: ok or fail.
if [ "${MODE:-ok}" = ok ]; then
  body='{"OK":true,"Errors":[]}'
else
  body="{\"OK\":false,\"Errors\":[\"${FAIL_REASON:-the curl check failed}\"]}"
fi
# A real check does its work first. Posting at once can beat the kubelet's first status update (the
# pod's IP is not in the API yet), and the source-address lookup then answers 400, as v2's did.
sleep "${WORK_SECONDS:-3}"
echo "curl-check: POST $KH_REPORTING_URL $body"
exec curl -sS --fail-with-body --retry 10 --retry-connrefused --retry-delay 1 --max-time 10 \
  -X POST -H 'Content-Type: application/json' -d "$body" "$KH_REPORTING_URL"
