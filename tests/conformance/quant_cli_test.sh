#!/usr/bin/env bash
# `herd quantize` and `herd perplexity` end to end against llama.cpp's files and numbers.
set -uo pipefail
HERD="$TEST_SRCDIR/$TEST_WORKSPACE/tools/herd/herd"
SHARED="${HERD_SHARED:-}"
if [[ -z "$SHARED" || ! -d "$SHARED/reference/quant" ]]; then
  echo "SKIPPED: ../shared not found: set HERD_SHARED to run the quantization CLI tests"
  exit 0
fi
Q="$SHARED/reference/quant"
tmp="${TEST_TMPDIR:-$(mktemp -d)}/quant_cli"
rm -rf "$tmp" && mkdir -p "$tmp/out"
fails=0
pass() { echo "PASS $1"; }
fail() { echo "FAIL $1"; fails=$((fails+1)); }

# 1. llama-quantize's command lines give llama-quantize's files, byte for byte.
"$HERD" quantize "$Q/synth256-F32.gguf" "$tmp/out/q4km.gguf" Q4_K_M 2 2>"$tmp/q.err" || { cat "$tmp/q.err"; exit 1; }
cmp -s "$tmp/out/q4km.gguf" "$Q/synth256-Q4_K_M.gguf" && pass "synth256 Q4_K_M byte-identical" || fail "synth256 Q4_K_M"
grep -q "wrote .*Q4_K_M, 39 tensors (F32 9, Q4_K 25, Q6_K 5)" "$tmp/q.err" && pass "summary line" || { fail "summary"; cat "$tmp/q.err"; }
"$HERD" quantize --pure "$Q/synth256-F32.gguf" "$tmp/out/q3p.gguf" q3_k 2>/dev/null
cmp -s "$tmp/out/q3p.gguf" "$Q/synth256-Q3_K-pure.gguf" && pass "--pure Q3_K byte-identical" || fail "--pure Q3_K"
"$HERD" quantize --tensor-type ffn_down=f16 "$SHARED/models/stories260K.gguf" "$tmp/out/s5.gguf" Q5_1 1 2>/dev/null
cmp -s "$tmp/out/s5.gguf" "$Q/stories260K-Q5_1.gguf" && pass "--tensor-type ffn_down=f16 Q5_1 byte-identical" \
  || fail "--tensor-type Q5_1"

# 2. Errors: one line, exit 1, nothing written.
"$HERD" quantize "$SHARED/models/stories260K.gguf" "$tmp/out/bad.gguf" Q8_0 2>"$tmp/e1.err"
rc=$?
[[ $rc -eq 1 ]] && grep -q "no tensor type fallback is defined for type q8_0" "$tmp/e1.err" \
  && pass "no-fallback error" || { fail "no-fallback error (rc $rc)"; cat "$tmp/e1.err"; }
head -c 100000 "$Q/synth256-F32.gguf" >"$tmp/trunc.gguf"
"$HERD" quantize "$tmp/trunc.gguf" "$tmp/out/t.gguf" Q4_0 2>"$tmp/e2.err"
rc=$?
[[ $rc -eq 1 ]] && pass "truncated source rejected" || { fail "truncated source (rc $rc)"; cat "$tmp/e2.err"; }
"$HERD" quantize "$Q/synth256-F32.gguf" "$tmp/out/x.gguf" Q9_K 2>/dev/null
[[ $? -eq 1 ]] && pass "unknown type rejected" || fail "unknown type"
left=$(ls "$tmp/out" | grep -v -x -e q4km.gguf -e q3p.gguf -e s5.gguf | wc -l)
[[ $left -eq 0 ]] && pass "failed runs left nothing behind" || { fail "left files"; ls -la "$tmp/out"; }

# 3. Perplexity as llama-perplexity prints it.
"$HERD" perplexity -m "$SHARED/models/stories260K.gguf" -f "$SHARED/reference/ppl-text.txt" -c 128 \
  >"$tmp/ppl.out" 2>"$tmp/ppl.err" || { cat "$tmp/ppl.err"; exit 1; }
grep -q "^Final estimate: PPL = 1.705[4-6] +/- 0.037" "$tmp/ppl.out" && pass "stories260K PPL 1.7055" \
  || { fail "perplexity"; cat "$tmp/ppl.out"; }
grep -q "^\[1\]1.78[67][0-9],\[2\]" "$tmp/ppl.out" && pass "running PPL per chunk" || fail "running PPL"

echo "$fails failure(s)"
exit $((fails > 0))
