#!/usr/bin/env bash
# `herd up` supervision: a loader killed with SIGKILL is back serving within 5 s (and
# restarted on the same port); a second kill right after waits twice as long (backoff);
# a killed worker comes back, fetches its model from the restarted loader, and the model
# is served again; every exit is logged with its status; no zombies; Ctrl-C stops all.
set -uo pipefail
R="$TEST_SRCDIR/$TEST_WORKSPACE"
HERD="$R/tools/herd/herd"
SHARED="${HERD_SHARED:-}"
if [[ -z "$SHARED" || ! -d "$SHARED/models" ]]; then
  echo "SKIPPED: ../shared not found: set HERD_SHARED to run the supervision test"
  exit 0
fi
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
log="$tmp/up.log"
"$HERD" up --models "$SHARED/models" --model stories260K >"$log" 2>&1 &
up=$!
trap 'kill -INT $up 2>/dev/null; wait $up 2>/dev/null' EXIT
fail() { echo "FAIL: $*"; echo "--- herd up log:"; cat "$log"; exit 1; }
now() { date +%s.%N; }
since() { echo "$(now) - $1" | bc; }

for _ in $(seq 1 1200); do
  grep -q "^ready;" "$log" && break
  kill -0 $up 2>/dev/null || fail "herd up exited"
  sleep 0.1
done
grep -q "^ready;" "$log" || fail "herd up not ready"
loader=$(sed -n 's/^loader   \([^ ]*\)$/\1/p' "$log")
gateway=$(sed -n 's/^gateway  \([^ ]*\) (gRPC)$/\1/p' "$log")
[[ -n "$loader" && -n "$gateway" ]] || fail "no loader/gateway address"

# The pid of herd up's child running services/NAME/NAME.
child() {
  local p
  for p in /proc/[0-9]*; do
    [[ -r "$p/stat" ]] || continue
    local stat ppid exe
    stat=$(cat "$p/stat" 2>/dev/null) || continue
    ppid=$(echo "${stat##*) }" | cut -d' ' -f2)
    [[ "$ppid" == "$up" ]] || continue
    exe=$(tr '\0' ' ' <"$p/cmdline" 2>/dev/null | cut -d' ' -f1)
    [[ "$exe" == */services/$1/$1 ]] && { echo "${p#/proc/}"; return 0; }
  done
  return 1
}
generate() {
  "$HERD" generate --gateway "$gateway" -m stories260K -p "Once upon a time" -n 8 --temp 0 --timeout-ms 10000 \
    2>/dev/null
}
out=$(generate) || fail "generate before the kills"
[[ "$out" == ", there was a little girl"* ]] || fail "unexpected text: $out"

# 1. The loader, killed, is back serving within 5 s on the same address.
lpid=$(child loader) || fail "no loader child"
kill -9 "$lpid"
t0=$(now)
ok=0
while (( $(echo "$(since "$t0") < 5" | bc) )); do
  if "$HERD" health "$loader" --service herd.v1.Loader --timeout 1 >/dev/null 2>&1; then ok=1; break; fi
  sleep 0.05
done
back=$(since "$t0")
((ok)) || fail "loader not back within 5 s"
npid=$(child loader) || fail "no new loader child"
[[ "$npid" != "$lpid" ]] || fail "the loader pid did not change"
echo "PASS loader back serving at $loader after ${back} s"
grep -q "herd up: loader (pid $lpid) killed by signal 9 (Killed) after .* s; restarting in 100 ms" "$log" ||
  fail "no restart line for the loader"

# 2. Killed again at once: twice the delay (it did not stay up 10 s).
kill -9 "$npid"
for _ in $(seq 1 100); do
  grep -q "herd up: loader (pid $npid) killed by signal 9" "$log" && break
  sleep 0.05
done
grep -q "herd up: loader (pid $npid) killed by signal 9 (Killed) after .* s; restarting in 200 ms" "$log" ||
  fail "no doubled backoff"
t0=$(now)
until "$HERD" health "$loader" --service herd.v1.Loader --timeout 1 >/dev/null 2>&1; do
  (( $(echo "$(since "$t0") < 5" | bc) )) || fail "loader not back within 5 s after the second kill"
  sleep 0.05
done
echo "PASS second restart after the doubled backoff"

# 3. A killed worker restarts, loads its model from the restarted loader, serves again.
wpid=$(child worker) || fail "no worker child"
kill -9 "$wpid"
t0=$(now)
until out=$(generate) && [[ "$out" == ", there was a little girl"* ]]; do
  (( $(echo "$(since "$t0") < 30" | bc) )) || fail "model not served again within 30 s of the worker's death"
  sleep 0.2
done
echo "PASS worker restarted, model served again after $(since "$t0") s"
grep -q "herd up: worker-stories260K-0 (pid $wpid) killed by signal 9" "$log" || fail "no restart line for the worker"

# 4. No zombies among herd up's children.
for p in /proc/[0-9]*; do
  stat=$(cat "$p/stat" 2>/dev/null) || continue
  rest="${stat##*) }"
  [[ "$(echo "$rest" | cut -d' ' -f2)" == "$up" && "$(echo "$rest" | cut -d' ' -f1)" == "Z" ]] &&
    fail "zombie child ${p#/proc/}"
done
echo "PASS no zombies"

# 5. Ctrl-C stops everything.
kill -INT $up
wait $up
rc=$?
trap - EXIT
[[ $rc -eq 0 ]] || fail "herd up exited $rc"
child loader >/dev/null && fail "loader still running after herd up stopped"
echo "PASS supervision"
