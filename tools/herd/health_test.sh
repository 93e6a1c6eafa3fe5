#!/usr/bin/env bash
# herd health against a real server (a loader on an empty model directory): exit 0 and
# "SERVING" for the server and its service, 1 for an unknown service and a closed port,
# 2 for usage errors; exactly one line on stderr every time.
set -uo pipefail
R="$TEST_SRCDIR/$TEST_WORKSPACE"
HERD="$R/tools/herd/herd"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
mkdir -p "$tmp/models"
"$R/services/loader/loader" --models_dir="$tmp/models" --host=127.0.0.1 --port=0 --metrics_port=-1 >"$tmp/loader.log" 2>&1 &
loader=$!
trap 'kill $loader 2>/dev/null; wait $loader 2>/dev/null' EXIT
addr=""
for _ in $(seq 1 300); do
  addr=$(sed -n 's/^loader listening on \([^ ]*\)$/\1/p' "$tmp/loader.log")
  [[ -n "$addr" ]] && break
  kill -0 $loader 2>/dev/null || { cat "$tmp/loader.log"; echo "FAIL: loader exited"; exit 1; }
  sleep 0.1
done
[[ -n "$addr" ]] || { cat "$tmp/loader.log"; echo "FAIL: loader did not start"; exit 1; }
fails=0
expect() {  # expect RC STDERR-PATTERN ARGS...
  local want="$1" pat="$2"
  shift 2
  "$HERD" health "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  if [[ $rc -eq $want && $(wc -l <"$tmp/err") -eq 1 && ! -s "$tmp/out" ]] && grep -qE -- "$pat" "$tmp/err"; then
    echo "PASS herd health $* -> $rc: $(cat "$tmp/err")"
  else
    echo "FAIL herd health $*: exit $rc (want $want), stderr: $(cat "$tmp/err"), stdout: $(cat "$tmp/out")"
    fails=$((fails + 1))
  fi
}
expect 0 ": SERVING$" "$addr"
expect 0 "service herd.v1.Loader: SERVING$" "$addr" --service herd.v1.Loader
expect 0 ": SERVING$" --timeout 2.5 "$addr" --service=herd.v1.Loader
expect 1 "service herd.v1.Nope: error: .*code 5" "$addr" --service herd.v1.Nope
expect 1 "127.0.0.1:1: error: " 127.0.0.1:1 --timeout 2
expect 2 "give exactly one ADDR"
expect 2 "unknown|--bogus" "$addr" --bogus
expect 2 "--timeout" "$addr" --timeout 0
"$HERD" health -h | grep -q "usage: herd health ADDR" && echo "PASS -h" || { echo "FAIL -h"; fails=$((fails + 1)); }
((fails == 0)) || exit 1
echo "herd health: all checks passed"
