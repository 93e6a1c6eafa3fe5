#!/usr/bin/env bash
# The speculative options of the herd CLI: `herd run --spec-type ...` (in process) and
# `herd up --draft-workers` + `herd generate --spec-type ...` (through the services).
# Greedy text equals the non-speculative text; statistics are printed llama.cpp-style.
set -uo pipefail
R="$TEST_SRCDIR/$TEST_WORKSPACE"
HERD="$R/tools/herd/herd"
SHARED="${HERD_SHARED:-}"
if [[ -z "$SHARED" || ! -d "$SHARED/models" ]]; then
  echo "SKIPPED: ../shared not found: set HERD_SHARED to run the speculative CLI test"
  exit 0
fi
M="$SHARED/models"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
fails=0
fail() { echo "FAIL $*"; fails=$((fails+1)); }
# A prompt holding a passage the model repeats.
{ head -c 330 "$M/stories260K.run_c_t0_n256.txt"; echo; head -c 40 "$M/stories260K.run_c_t0_n256.txt"; } >"$tmp/prompt.txt"

# 1. herd run: every type equals plain greedy generation.
"$HERD" run -m "$M/stories260K.gguf" -f "$tmp/prompt.txt" -n 96 --temp 0 >"$tmp/plain.txt" 2>"$tmp/plain.err" \
  || { cat "$tmp/plain.err"; exit 1; }
for type in ngram-simple ngram-map-k ngram-map-k4v ngram-cache draft-model; do
  "$HERD" run -m "$M/stories260K.gguf" -f "$tmp/prompt.txt" -n 96 --temp 0 --spec-type "$type" \
    --spec-ngram-size-n 3 --spec-ngram-size-m 16 --draft-max 8 --draft-min 1 -md "$M/stories260K.gguf" \
    >"$tmp/$type.txt" 2>"$tmp/$type.err" || { cat "$tmp/$type.err"; fail "herd run --spec-type $type"; continue; }
  cmp -s "$tmp/plain.txt" "$tmp/$type.txt" && echo "PASS herd run --spec-type $type == plain" \
    || fail "herd run --spec-type $type differs"
  line=$(grep "statistics $type: #calls = " "$tmp/$type.err")
  [[ -n "$line" ]] && echo "  $line" || fail "no statistics line for $type"
  [[ "$type" == draft-model ]] || grep -q "#acc tokens = [1-9]" "$tmp/$type.err" || fail "$type accepted nothing"
done
# -md alone means draft-model; sampled drafts at temperature > 0 run.
"$HERD" run -m "$M/stories260K.gguf" -p "Once upon a time" -n 32 --temp 0.8 -s 7 -md "$M/stories260K.gguf" \
  >/dev/null 2>"$tmp/md.err" && grep -q "statistics draft-model" "$tmp/md.err" && echo "PASS -md at temperature 0.8" \
  || { cat "$tmp/md.err"; fail "-md at temperature 0.8"; }
# -lcd: the dynamic n-gram cache is written back.
"$HERD" run -m "$M/stories260K.gguf" -p "Once upon a time" -n 32 --temp 0 --spec-type ngram-cache \
  -lcd "$tmp/dyn.bin" >/dev/null 2>"$tmp/lcd.err" && [[ -s "$tmp/dyn.bin" ]] && echo "PASS -lcd written" \
  || { cat "$tmp/lcd.err"; fail "-lcd"; }
"$HERD" run -m "$M/stories260K.gguf" -p "Once upon a time" -n 8 --temp 0 --spec-type ngram-cache \
  -lcs "$tmp/dyn.bin" -lcd "$tmp/dyn.bin" >/dev/null 2>"$tmp/lcs.err" && echo "PASS -lcs read" \
  || { cat "$tmp/lcs.err"; fail "-lcs"; }
# Bad options: usage errors naming the option.
for bad in "--spec-type magic" "--spec-type draft-model" "--spec-type ngram-simple --spec-ngram-size-n 0" \
           "--spec-type ngram-simple --draft-min 20"; do
  "$HERD" run -m "$M/stories260K.gguf" -p hi $bad >/dev/null 2>"$tmp/bad.err"; rc=$?
  [[ $rc -eq 2 ]] && echo "PASS rejected: $bad: $(head -1 "$tmp/bad.err")" || fail "accepted: $bad (rc $rc)"
done

# 2. herd up --draft-workers 1 + herd generate --spec-type: same text, statistics printed.
log="$tmp/up.log"
source "$R/tests/e2e/herd_up.sh"
start_herd_up "$log" "$HERD" up --models "$M" --model stories260K --draft-workers 1 \
  --model-draft "$M/stories260K.gguf" --draft-timeout-ms 3000
grep -q "^draft    " "$log" && echo "PASS herd up lists the draft worker" || fail "no draft worker line"
prompt=$(cat "$tmp/prompt.txt")
"$HERD" generate --gateway "$addr" -m stories260K -p "$prompt" -n 64 --temp 0 >"$tmp/g0.txt" 2>"$tmp/g0.err" \
  || { cat "$tmp/g0.err"; fail "herd generate"; }
for type in ngram-map-k draft-model; do
  "$HERD" generate --gateway "$addr" -m stories260K -p "$prompt" -n 64 --temp 0 --spec-type "$type" \
    --spec-ngram-size-n 3 --draft-max 8 >"$tmp/g-$type.txt" 2>"$tmp/g-$type.err" \
    || { cat "$tmp/g-$type.err"; fail "herd generate --spec-type $type"; continue; }
  cmp -s "$tmp/g0.txt" "$tmp/g-$type.txt" && echo "PASS herd generate --spec-type $type == plain" \
    || fail "herd generate --spec-type $type differs"
  grep -q "statistics $type: #calls = [1-9]" "$tmp/g-$type.err" && echo "  $(grep statistics "$tmp/g-$type.err")" \
    || { cat "$tmp/g-$type.err"; fail "no statistics from herd generate ($type)"; }
done
"$HERD" generate --gateway "$addr" -m stories260K -p hi -n 4 --spec-type ngram-simple --spec-ngram-size-m 0 \
  >/dev/null 2>"$tmp/gbad.err"; rc=$?
[[ $rc -ne 0 ]] && grep -q "speculative.ngram_size_m" "$tmp/gbad.err" && echo "PASS bad override: $(cat "$tmp/gbad.err")" \
  || { cat "$tmp/gbad.err"; fail "bad override accepted (rc $rc)"; }

echo "$fails failure(s)"
exit $(( fails > 0 ))
