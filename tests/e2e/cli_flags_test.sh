#!/usr/bin/env bash
# Every binary a llama.cpp user meets answers -h/--help and --version with exit 0,
# and the herd CLI takes llama.cpp's flag spellings.
set -uo pipefail
R="$TEST_SRCDIR/$TEST_WORKSPACE"
fails=0
expect_ok() {  # name, command...
  local name=$1; shift
  local out rc
  out=$("$@" 2>&1); rc=$?
  if [[ $rc -eq 0 && -n "$out" ]]; then echo "PASS $name"; else echo "FAIL $name (rc $rc): ${out:0:300}"; fails=$((fails+1)); fi
}
for svc in loader worker gateway draft; do
  bin="$R/services/$svc/$svc"
  for flag in -h --help --version; do expect_ok "$svc $flag" "$bin" "$flag"; done
  version=$("$bin" --version)
  grep -q "herd 0\.[0-9]*\.[0-9]*, optimized build" <<<"$version" && echo "PASS $svc --version is an optimized build" \
    || { echo "FAIL $svc --version: $version"; fails=$((fails+1)); }
  help=$("$bin" --help)
  grep -q -- "--port" <<<"$help" && echo "PASS $svc --help lists its flags" \
    || { echo "FAIL $svc --help lists no --port"; fails=$((fails+1)); }
  for f in --tls_cert_file --tls_ca_file --cluster_key_file; do
    grep -q -- "$f" <<<"$help" && echo "PASS $svc --help lists $f" \
      || { echo "FAIL $svc --help lists no $f"; fails=$((fails+1)); }
  done
  "$bin" --no_such_flag >/dev/null 2>&1 && { echo "FAIL $svc accepts an unknown flag"; fails=$((fails+1)); } \
    || echo "PASS $svc refuses an unknown flag"
done
HERD="$R/tools/herd/herd"
expect_ok "herd --version" "$HERD" --version
expect_ok "herd -h" "$HERD" -h
for cmd in run tokenize inspect convert quantize perplexity up generate; do
  expect_ok "herd $cmd -h" "$HERD" "$cmd" -h
  expect_ok "herd $cmd --help" "$HERD" "$cmd" --help
done
# llama.cpp spellings in `herd up -h`.
up_help=$("$HERD" up -h)
for f in -c --ctx-size -np --parallel -ctk -ngl --port --http-port --chat-template --remote-split; do
  grep -q -- "$f" <<<"$up_help" && echo "PASS herd up takes $f" || { echo "FAIL herd up -h lacks $f"; fails=$((fails+1)); }
done
run_help=$("$HERD" run -h)
for f in -c --ctx-size -ctk -ngl -n --n-predict; do
  grep -q -- "$f" <<<"$run_help" && echo "PASS herd run takes $f" || { echo "FAIL herd run -h lacks $f"; fails=$((fails+1)); }
done
echo "$fails failure(s)"
exit $(( fails > 0 ))
