#!/usr/bin/env bash
# docs/benchmarks.md from fresh runs on this machine (`make benchmarks`):
#
#   bench/benchmarks.sh [OUT_DIR]   # default build/benchmarks: its JSON, printed tables and logs,
#                                   # then docs/benchmarks.md (python -m webmp.bench.markdown)
#
# 1. `webmp bench --tune --profile` at the default size, tuned for TUNE_BUDGET seconds (300) first
#    into OUT_DIR/tune.json, made afresh (or into $WEBMP_TUNE_CACHE where it is set); TUNE_BUDGET=0:
#    no tuning, the tiles of the cache $WEBMP_TUNE_CACHE (else ~/.cache/webmp/tune.json) names;
#    MEMORY=1: with `--memory` (the GPT's memory levers: ~10 min more on a 2-core machine)
# 2. `webmp bench --models digits` with an empty tune cache of its own: the matmuls with the tiles a
#    first run uses (the untuned targets)
# 3. `webmp bench --cold-start` for the default MLP and for the GPT (new processes, Mesa caches of
#    their own; the page's half needs Chromium: scripts/setup.sh test)
# 4. `mpirun -n 2 webmp bench --ranks 2`, where mpirun is (RANKS=0 skips it)
# 5. bench/tinygrad_side_by_side.sh 16, where its venv is ($TINY_VENV, default /work/tiny-venv,
#    made by `bench/tinygrad_side_by_side.sh setup`)
#
# Environment: SIZE (default), TUNE_BUDGET (300), MEMORY, WEBMP_TUNE_CACHE, COLD_STARTS ("mlp gpt"), RANKS
# (2), TINY_VENV, DOC (the page written: docs/benchmarks.md). `SIZE=tiny TUNE_BUDGET=0 RANKS=0
# COLD_STARTS= DOC=/tmp/b.md bench/benchmarks.sh /tmp/b` tries the script in a minute.
#
# Measured: 8 min 20 s on a 2-core machine with lavapipe, without tinygrad (its side by side adds
# ~3 min); run it with nothing else on the machine: the figures are only as quiet as the host.
set -euo pipefail
cd "$(dirname "$0")/.."
out="$(mkdir -p "${1:-build/benchmarks}" && cd "${1:-build/benchmarks}" && pwd)"
size="${SIZE:-default}"
doc="${DOC:-docs/benchmarks.md}"
. scripts/env.sh
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
budget="${TUNE_BUDGET:-300}"
if [ "$budget" != 0 ]; then
  if [ -z "${WEBMP_TUNE_CACHE:-}" ]; then  # a table of this run's own, tuned from nothing
    export WEBMP_TUNE_CACHE="$out/tune.json"
    rm -f "$WEBMP_TUNE_CACHE"
  fi
  tune=(--tune --tune-budget "$budget")
else
  tune=()
fi
memory=()
[ "${MEMORY:-0}" = 1 ] && memory=(--memory)
say() { printf 'benchmarks: %s\n' "$*" >&2; }
start=$SECONDS

say "webmp bench --size $size ${tune[*]} --profile ${memory[*]}"
python3 -m webmp bench --size "$size" "${tune[@]}" --profile "${memory[@]}" --out "$out/bench.json" >"$out/bench.txt" 2>"$out/bench.log"
args=("$out/bench.json")

say "webmp bench --size $size --models digits, an empty tune cache (the untuned matmuls)"
if WEBMP_TUNE_CACHE="$out/untuned-tune.json" python3 -m webmp bench --size "$size" --models digits \
  --out "$out/untuned.json" >"$out/untuned.txt" 2>"$out/untuned.log"; then
  args+=(--untuned "$out/untuned.json")
else
  say "the untuned run failed ($out/untuned.log)"
fi
rm -f "$out/untuned-tune.json"

for model in ${COLD_STARTS-mlp gpt}; do
  say "webmp bench --cold-start $model"
  if python3 -m webmp bench --cold-start "$model" --out "$out/cold-$model.json" >"$out/cold-$model.txt" 2>"$out/cold-$model.log"; then
    args+=(--cold-start "$out/cold-$model.json")
  else
    say "the $model cold start failed ($out/cold-$model.log); the page says it is not recorded"
  fi
done

ranks="${RANKS:-2}"
if [ "$ranks" -gt 1 ] && command -v mpirun >/dev/null; then
  say "mpirun -n $ranks webmp bench --ranks $ranks"
  if OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun -n "$ranks" --oversubscribe \
    python3 -m webmp bench --size "$size" --ranks "$ranks" --out "$out/ranks.json" >"$out/ranks.txt" 2>"$out/ranks.log"; then
    args+=(--ranks "$out/ranks.json")
  else
    say "the data-parallel run failed ($out/ranks.log)"
  fi
fi

if [ -x "${TINY_VENV:-/work/tiny-venv}/bin/python" ]; then
  say "bench/tinygrad_side_by_side.sh 16"
  if OUT="$out/side-by-side.jsonl" bench/tinygrad_side_by_side.sh 16 >"$out/side-by-side.txt" 2>"$out/side-by-side.log"; then
    args+=(--side-by-side "$out/side-by-side.jsonl")
  else
    say "the side-by-side run failed ($out/side-by-side.log)"
  fi
fi

python3 -m webmp.bench.markdown "${args[@]}" >"$doc"
say "wrote $doc from ${args[*]} in $(((SECONDS - start) / 60)) min $(((SECONDS - start) % 60)) s"
