#!/usr/bin/env bash
# fuzz/run.sh - `make fuzz`: builds and runs every fuzz target for FUZZ_SECONDS each (default 30).
#   gguf       the GGUF reader; seeds: every *.gguf of $SHARED/models and tests/data, whole files
#   tokenizer  SentencePiece and BPE tokenizers on arbitrary bytes, once per vocabulary GGUF found
#              ($SHARED/vectors/tokenizer/ggml-vocab-*.gguf, tests/data/*vocab*.gguf); seeds: their .inp texts
#   session    the KV session loader, with stories260K.gguf of $SHARED/models or tests/data; seed: a valid session
#   prefix_entry  the entry parser of the prefix-block stores and the directory store's read; seed: a valid entry
#   kld        the reader of llama-perplexity's base log-probability files (perplexity --kl-divergence) and the
#              statistics over its rows; seed: a valid file of 2 chunks
#   embd       the embeddings endpoints (kvt_embd_answer: request parsing, tokenizing, the forward pass, pooling,
#              normalisation) on an embedder of tests/data/stories260K.gguf; seeds: written by the target
#   infill     POST /infill: request parsing and the fill-in-the-middle prompt on two synthetic vocabularies (with and
#              without repository / file tokens), every flag and budget; seeds written by the target
#   plan       the planner's JSON readers: profile (--profile FILE) and plan file (--plan FILE), each input to both,
#              with what a loaded plan goes through (kvt_plan_apply) and a write/read-back; seeds: fuzz/seeds/plan
#   grammar    the GBNF compiler and matcher (sched/grammar.h): a grammar text and a text to match ("\n---\n" between),
#              compiled, matched whole and in pieces, and a walk over a fixed vocabulary checking the token filter;
#              seeds: fuzz/seeds/grammar (llama.cpp's json, arithmetic, list grammars, repetitions, tokens, escapes)
# With clang: libFuzzer (+ASan+UBSan) over a library built by clang in build-fuzz. Without: the same
# targets linked with fuzz/fuzz_main.c (a mutation driver) and gcc's ASan+UBSan. A target whose input
# files are absent is skipped with the reason. Crashes stop the run (exit status 1).
set -euo pipefail
SHARED=${SHARED:-../shared}
SECS=${FUZZ_SECONDS:-30}
B=build-fuzz
shopt -s nullglob
seeds=("$SHARED"/models/*.gguf tests/data/*.gguf)
vocabs=("$SHARED"/vectors/tokenizer/ggml-vocab-*.gguf tests/data/*vocab*.gguf)
# the first of these files that exists (a path without a glob character stays in an array even when absent)
first_file() { for f in "$@"; do [ -f "$f" ] && { echo "$f"; return 0; }; done; return 0; }
model=$(first_file "$SHARED"/models/stories260K.gguf tests/data/stories260K.gguf)
if command -v clang >/dev/null 2>&1; then
  CC=clang; SAN="-fsanitize=address,undefined -fno-sanitize-recover=all"; LIBFUZZER=1
  LIBFLAGS="$SAN -fsanitize=fuzzer-no-link"; LINK="-fsanitize=fuzzer"
else
  CC=${CC:-gcc}; SAN="-fsanitize=address,undefined -fno-sanitize-recover=all"; LIBFUZZER=0
  LIBFLAGS="$SAN"; LINK="fuzz/fuzz_main.c"
fi
# (clang warns where gcc does not: those warnings stay warnings in this build)
make -s -j2 BUILD=$B CC=$CC OPT=-O1 CFLAGS="$LIBFLAGS -fno-omit-frame-pointer -Wno-error" SIMD_CFLAGS="-Wno-error" \
  $B/libkvtier.a
build() { # target name
  $CC -std=c11 -O1 -g -D_GNU_SOURCE -pthread $SAN $LINK fuzz/fuzz_$1.c $B/libkvtier.a -o $B/fuzz_$1 -lm -ldl \
    $(test -f $B/.uring-1 && echo -luring || true) $(test -f $B/.hiredis-1 && echo -lhiredis || true) \
    $(test "$JANSSON" = 1 && echo -ljansson || true)
}
# libjansson (the serve code's JSON): the embeddings target needs it (the Makefile's own probe)
JANSSON=0
printf '#include <jansson.h>\nint main(void){json_decref(json_object()); return 0;}\n' |
  $CC -x c - -ljansson -o /dev/null 2>/dev/null && JANSSON=1
run() { # target corpus-dir extra-seed-files...
  local t=$1 dir=$2; shift 2
  if [ $LIBFUZZER = 1 ]; then
    local max=4096 rc=0
    for f in "$@" "$dir"/*; do [ -f "$f" ] && s=$(stat -c %s "$f") && [ "$s" -gt "$max" ] && max=$s; done
    for f in "$@"; do cp -f "$f" "$dir"/; done
    # (the target's status kept apart from the filter's: a target that stops before fuzzing, printing none of
    # these lines, used to pass as the status of `grep || true`)
    ./$B/fuzz_$t -max_total_time="$SECS" -max_len="$max" -rss_limit_mb=4096 -print_final_stats=1 "$dir" \
      > $B/fuzz_$t.log 2>&1 || rc=$?
    grep -E "^(stat::number_of_executed_units|stat::peak_rss_mb|==.*ERROR|SUMMARY|Done)" $B/fuzz_$t.log || true
    [ $rc = 0 ] || { tail -n 5 $B/fuzz_$t.log; echo "fuzz_$t: exit status $rc"; }
    test $rc = 0
  else
    ./$B/fuzz_$t 0 > /dev/null # runs LLVMFuzzerInitialize once: a target may write its seed into $dir
    ./$B/fuzz_$t "$SECS" "$@" "$dir"/*
  fi
}
# A target that writes its own seeds into its corpus (KVT_FUZZ_SEED_DIR): built, announced as "== fuzz TITLE", run.
seeded() { # target title
  build "$1" || return 1
  echo "== fuzz $2"
  mkdir -p $B/corpus_$1
  KVT_FUZZ_SEED_DIR=$B/corpus_$1 run "$1" $B/corpus_$1
}
status=0
echo "== fuzz gguf (${#seeds[@]} seeds, whole files)"
build gguf && mkdir -p $B/corpus_gguf && { run gguf $B/corpus_gguf "${seeds[@]}" || status=1; }
if [ ${#vocabs[@]} -gt 0 ]; then
  build tokenizer
  for v in "${vocabs[@]}"; do
    n=$(basename "$v" .gguf)
    echo "== fuzz tokenizer $n"
    mkdir -p $B/corpus_tok_$n
    inp=(); [ -f "$v.inp" ] && inp=("$v.inp")
    KVT_FUZZ_VOCAB="$v" run tokenizer $B/corpus_tok_$n "${inp[@]}" || status=1
  done
else
  echo "== fuzz tokenizer: skipped (no vocabulary GGUF in $SHARED/vectors/tokenizer or tests/data)"
fi
if [ -n "$model" ]; then
  KVT_FUZZ_MODEL="$model" seeded session "session (model $model)" || status=1
else
  echo "== fuzz session: skipped (no stories260K.gguf in $SHARED/models or tests/data)"
fi
seeded prefix_entry prefix_entry || status=1
seeded kld "kld (perplexity base files)" || status=1
if [ "$JANSSON" = 1 ] && [ -n "$model" ]; then
  KVT_FUZZ_MODEL="$model" seeded embd "embd (embeddings requests, model $model)" || status=1
else
  echo "== fuzz embd: skipped (built without libjansson, or no stories260K.gguf)"
fi
if [ "$JANSSON" = 1 ]; then
  seeded infill "infill (/infill requests and their prompts)" || status=1
else
  echo "== fuzz infill: skipped (built without libjansson)"
fi
build plan
echo "== fuzz plan (profile and plan JSON)"
mkdir -p $B/corpus_plan
run plan $B/corpus_plan fuzz/seeds/plan/*.json || status=1
build grammar
echo "== fuzz grammar (GBNF compiler and matcher)"
mkdir -p $B/corpus_grammar
run grammar $B/corpus_grammar fuzz/seeds/grammar/*.txt || status=1
exit $status
