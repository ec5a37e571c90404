#!/usr/bin/env bash
# `make test` in parts, each timed: `parts.sh begin` starts a tally, `parts.sh run NAME CMD...` runs one
# part and says its seconds, `parts.sh end` prints the table. The cold set-up (venv, test-bed build,
# tools) is a part of its own, printed apart from the tests' total: it is spent once per machine.
# Timings are printed, never judged: machines are shared and noisy.
set -u
TALLY=${KH_PARTS_FILE:-.make-test-parts}
case "${1:-}" in
  begin)
    : > "$TALLY" ;;
  run)
    name=$2; shift 2
    start=$(date +%s)
    "$@"; rc=$?
    secs=$(( $(date +%s) - start ))
    printf '%s\t%s\t%s\n' "$name" "$secs" "$rc" >> "$TALLY"
    printf '== make test, part "%s": %d s (%d min %02d s)%s\n' "$name" "$secs" $((secs / 60)) $((secs % 60)) \
      "$([ "$rc" = 0 ] || echo ", FAILED (exit $rc)")"
    exit "$rc" ;;
  end)
    [ -s "$TALLY" ] || exit 0
    echo "== make test, time per part =="
    awk -F '\t' '{ printf "   %-28s %6d s\n", $1, $2; if ($1 != "setup") t += $2; else s = $2 }
      END { printf "   %-28s %6d s (%d min), set-up apart: %d s\n", "tests in all", t, t / 60, s }' "$TALLY" ;;
  *)
    echo "usage: $0 begin | run NAME CMD... | end" >&2; exit 2 ;;
esac
