# Sourced by the end-to-end shell tests. start_herd_up LOG CMD...: runs CMD (a `herd up`
# command line) in the background with its output in LOG, interrupts it when the script
# exits, and sets $up (its PID) and $addr (the gateway's gRPC address, once announced);
# exits the script with a failure when herd up exits first or announces no gateway in 60 s.
start_herd_up() {
  local log="$1"
  shift
  "$@" >"$log" 2>&1 &
  up=$!
  trap 'kill -INT $up 2>/dev/null; wait $up 2>/dev/null' EXIT
  addr=""
  for _ in $(seq 1 600); do
    addr=$(sed -n 's/^gateway  \([^ ]*\) (gRPC)$/\1/p' "$log")
    [[ -n "$addr" ]] && break
    kill -0 $up 2>/dev/null || { cat "$log"; echo "FAIL: herd up exited"; exit 1; }
    sleep 0.1
  done
  [[ -n "$addr" ]] || { cat "$log"; echo "FAIL: no gateway address"; exit 1; }
}
