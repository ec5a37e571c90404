#!/bin/sh
[ "${MODE:-ok}" != timed ] || T0=$(date +%s.%N)  # first: the checker's own work starts here (bench/node_bench.py)
# The end-to-end tests' shell checker: it reports with the checkclient command line, as a user's shell
# check would (python3 -m kuberhealthy.checkclient ok | fail REASON...). MODE picks the behaviour the
# test needs: ok, fail (logs a line first, for the log-tail test), sleep (never exits), oom (grows past
# any memory limit), timed (ok, logging `start=` and `end=` unix times: this script's start and the
# moment the report returned, for bench/node_bench.py).
echo "shell-check: mode=${MODE:-ok} run=${KH_RUN_UUID:-unset}"
case "${MODE:-ok}" in
  ok)
    exec python3 -m kuberhealthy.checkclient ok ;;
  fail)
    echo "shell-check: ${LOG_LINE:-the shell check is about to fail}"
    exec python3 -m kuberhealthy.checkclient fail "${FAIL_REASON:-the shell check failed}" ;;
  sleep)
    exec sleep 1000000 ;;
  timed)
    echo "shell-check: timed start=$T0"
    python3 -m kuberhealthy.checkclient ok; rc=$?
    echo "shell-check: timed end=$(date +%s.%N) rc=$rc"
    exit "$rc" ;;
  oom)
    exec python3 -c 'chunks = [b"x" * (16 << 20) for _ in range(1024)]' ;;
  *)
    echo "shell-check: unknown MODE ${MODE}" >&2
    exit 2 ;;
esac
