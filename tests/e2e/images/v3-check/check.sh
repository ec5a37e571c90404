#!/bin/sh
# A checker built on a Kuberhealthy v3-style client, written here in sh: it behaves as v3's Go check
# client does. KH_REPORTING_URL and KH_RUN_UUID must be set; the URL's path (query and fragment aside)
# must be exactly /check, or nothing is sent (exit 3). The report is a JSON POST with the header
# kh-run-uuid; any answer but 200 or 400 is retried with a growing pause for up to 30 s; a 400 is not
# retried (exit 1 here, so the pod's log and phase say so).
# MODE: ok, fail (reports FAIL_REASON) or validate (checks the environment, says where it would report,
# sends nothing).
say() { echo "v3-check: $*"; }
url=${KH_REPORTING_URL:-}
if [ -z "$url" ]; then say "KH_REPORTING_URL is blank" >&2; exit 3; fi
if [ -z "${KH_RUN_UUID:-}" ]; then say "KH_RUN_UUID is blank" >&2; exit 3; fi
rest=${url#*://}
case "$rest" in
  */*) path="/${rest#*/}" ;;
  *) path="" ;;
esac
path=${path%%#*}
path=${path%%\?*}
if [ "$path" != /check ]; then
  say "KH_REPORTING_URL must point to the /check endpoint, got \"$path\"" >&2
  exit 3
fi
mode=${MODE:-ok}
if [ "$mode" = validate ]; then say "would report to $url for run $KH_RUN_UUID"; exit 0; fi
if [ "$mode" = ok ]; then
  body='{"OK":true,"Errors":[]}'
else
  body="{\"OK\":false,\"Errors\":[\"${FAIL_REASON:-the v3 check failed}\"]}"
fi
# The check's own work; also lets the kubelet publish the pod's IP before the report arrives.
sleep "${WORK_SECONDS:-3}"
pause=1
waited=0
while :; do
  say "POST $url run $KH_RUN_UUID $body"
  answer=$(curl -sS --max-time 10 -w '\n%{http_code}' -X POST -H 'Content-Type: application/json' \
    -H "kh-run-uuid: $KH_RUN_UUID" -d "$body" "$url")
  code=$(printf '%s\n' "$answer" | tail -n 1)
  say "answer $code: $(printf '%s\n' "$answer" | sed '$d')"
  case "$code" in
    200) exit 0 ;;
    400) exit 1 ;;
  esac
  if [ "$waited" -ge 30 ]; then say "giving up after ${waited}s" >&2; exit 2; fi
  sleep "$pause"
  waited=$((waited + pause))
  pause=$((pause * 2))
done
