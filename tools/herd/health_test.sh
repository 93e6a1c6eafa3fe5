#!/usr/bin/env bash
# herd health against a real server (a loader on an empty model directory): exit 0 and
# "SERVING" for the server and its service, 1 for an unknown service and a closed port,
# 2 for usage errors; exactly one line on stderr every time. Then TLS, mTLS and the
# cluster key against a secured loader.
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
# A second loader with mTLS, a cluster key and a closed health service (certificates made
# here with openssl): herd health needs --tls-ca-file, a client certificate and the key.
if command -v openssl >/dev/null; then
  c="$tmp/certs"; mkdir -p "$c"
  ec=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes)
  openssl req -x509 "${ec[@]}" -days 2 -subj /CN=herd-test-ca -keyout "$c/ca.key" -out "$c/ca.pem" 2>/dev/null
  printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth,clientAuth\n' >"$c/ext"
  openssl req "${ec[@]}" -subj /CN=leaf -keyout "$c/leaf.key" -out "$c/leaf.csr" 2>/dev/null
  openssl x509 -req -in "$c/leaf.csr" -CA "$c/ca.pem" -CAkey "$c/ca.key" -CAcreateserial -days 2 \
    -extfile "$c/ext" -out "$c/leaf.pem" 2>/dev/null
  echo "cluster-key-health-0123456789" >"$tmp/cluster.key"
  "$R/services/loader/loader" --models_dir="$tmp/models" --host=127.0.0.1 --port=0 --metrics_port=-1 \
    --tls_cert_file="$c/leaf.pem" --tls_key_file="$c/leaf.key" --tls_ca_file="$c/ca.pem" \
    --cluster_key_file="$tmp/cluster.key" --open_health=false >"$tmp/loader2.log" 2>&1 &
  loader2=$!
  trap 'kill $loader $loader2 2>/dev/null; wait $loader $loader2 2>/dev/null' EXIT
  addr2=""
  for _ in $(seq 1 300); do
    addr2=$(sed -n 's/^loader listening on \([^ ]*\)$/\1/p' "$tmp/loader2.log")
    [[ -n "$addr2" ]] && break
    kill -0 $loader2 2>/dev/null || break
    sleep 0.1
  done
  if [[ -z "$addr2" ]]; then
    cat "$tmp/loader2.log"; echo "FAIL: TLS loader did not start"; fails=$((fails + 1))
  else
    tls=(--tls-ca-file "$c/ca.pem" --tls-cert-file "$c/leaf.pem" --tls-key-file "$c/leaf.key")
    expect 1 "error: .*code 14" "$addr2" --timeout 3
    expect 1 "error: .*code 14" "$addr2" --timeout 3 --tls-ca-file "$c/ca.pem"
    expect 1 "missing or invalid API key.*code 16" "$addr2" "${tls[@]}"
    HERD_CLUSTER_KEY=wrong-key-0123456789 expect 1 "code 16" "$addr2" "${tls[@]}"
    HERD_CLUSTER_KEY=cluster-key-health-0123456789 expect 0 ": SERVING$" "$addr2" "${tls[@]}"
    expect 0 ": SERVING$" "$addr2" "${tls[@]}" --api-key-file "$tmp/cluster.key"
    expect 1 "cannot read TLS CA file" "$addr2" --tls-ca-file "$c/missing.pem"
  fi
else
  echo "SKIP TLS checks: no openssl"
fi
"$HERD" health -h | grep -q "usage: herd health ADDR" && echo "PASS -h" || { echo "FAIL -h"; fails=$((fails + 1)); }
((fails == 0)) || exit 1
echo "herd health: all checks passed"
