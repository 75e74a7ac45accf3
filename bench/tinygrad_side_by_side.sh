#!/usr/bin/env bash
# webmp's GPT training step (mixed) beside tinygrad's WEBGPU backend on the same adapter, in one run:
# for each batch size, webmp's step (bench/webmp_gpt_step.py) and tinygrad's (bench/tinygrad_gpt.py,
# in its own venv) alternate ROUNDS times; prints each figure and the ratio webmp / tinygrad.
# Not part of the tests or CI (tinygrad is no dependency of webmp).
#
#   bench/tinygrad_side_by_side.sh setup        # once: the venv and a private clang (below)
#   bench/tinygrad_side_by_side.sh [BATCH ...]  # default: 16; JSON lines go to $OUT (tinygrad-side-by-side.jsonl)
#
# Environment: TINY_VENV (default /work/tiny-venv), ROUNDS (1), STEPS (tinygrad's timed steps, 10),
# WEBMP_TUNE_CACHE (webmp's matmul tiles for this adapter), N_LAYER N_HEAD D_MODEL CONTEXT (webmp's
# default GPT: 2 4 128 64).
#
# What tinygrad 0.14's WEBGPU device needs here:
# - libwebgpu_dawn: tinygrad loads library 'webgpu' (WEBGPU_PATH overrides the search); the PyPI
#   package dawn-python ships it as pydawn/lib/libwebgpu_dawn_x86_64.so.
# - Dawn's Vulkan backend finds lavapipe through VK_ICD_FILENAMES (/opt/webgpu-cpu/env.sh, via
#   scripts/env.sh, as webmp's wgpu-py does).
# - a clang: tinygrad opens its CPU device for host copies (a tensor's readback), and the CPU device
#   compiles its helper programs with `clang --target=x86_64-none-unknown-elf` at start (gcc does not
#   take --target). Debian's clang-14 and libclang-cpp14 packages, unpacked with dpkg -x into the
#   venv (no system install; libLLVM-14 is already on this machine for Mesa), with CC pointing at a
#   wrapper that sets LD_LIBRARY_PATH.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
TINY_VENV=${TINY_VENV:-/work/tiny-venv}

if [ "${1:-}" = setup ]; then
  python3 -m venv "$TINY_VENV"
  "$TINY_VENV/bin/pip" install 'tinygrad==0.14.*' dawn-python numpy
  mkdir -p "$TINY_VENV/debs" && (cd "$TINY_VENV/debs" && apt-get download clang-14 libclang-cpp14)
  for d in "$TINY_VENV"/debs/*.deb; do dpkg -x "$d" "$TINY_VENV/clang"; done
  cat >"$TINY_VENV/bin/clang" <<EOF
#!/bin/sh
C=$TINY_VENV/clang
LD_LIBRARY_PATH=\$C/usr/lib/x86_64-linux-gnu:\$C/usr/lib/llvm-14/lib\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH} exec \$C/usr/lib/llvm-14/bin/clang "\$@"
EOF
  chmod +x "$TINY_VENV/bin/clang"
  exit 0
fi

. scripts/env.sh
export PYTHONPATH=$ROOT${PYTHONPATH:+:$PYTHONPATH}
TPY=$TINY_VENV/bin/python
DAWN=$("$TPY" -c 'import pydawn, os; print(os.path.join(os.path.dirname(pydawn.__file__), "lib", "libwebgpu_dawn_x86_64.so"))')
ROUNDS=${ROUNDS:-1}
STEPS=${STEPS:-10}
OUT=${OUT:-tinygrad-side-by-side.jsonl}
DIMS=(--n-layer "${N_LAYER:-2}" --n-head "${N_HEAD:-4}" --d-model "${D_MODEL:-128}" --context "${CONTEXT:-64}")
BATCHES=("$@")
[ ${#BATCHES[@]} -gt 0 ] || BATCHES=(16)
: >"$OUT"

echo "uptime: $(uptime)"
for B in "${BATCHES[@]}"; do
  for r in $(seq "$ROUNDS"); do
    echo "batch $B round $r: webmp ..." >&2
    python3 bench/webmp_gpt_step.py "${DIMS[@]}" --batch-size "$B" | tail -1 | tee -a "$OUT" >/dev/null
    VOCAB=$(tail -1 "$OUT" | python3 -c 'import json, sys; print(json.load(sys.stdin)["vocab"])')
    echo "batch $B round $r: tinygrad ..." >&2
    WEBGPU_PATH=$DAWN CC=$TINY_VENV/bin/clang DEV=WEBGPU \
      "$TPY" bench/tinygrad_gpt.py "${DIMS[@]}" --batch-size "$B" --vocab "$VOCAB" --steps "$STEPS" \
      | tail -1 | tee -a "$OUT" >/dev/null
    echo "uptime: $(uptime)"
  done
done

python3 - "$OUT" <<'EOF'
import json, statistics, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
by = {}
for r in rows:
    b = r["step"]["batch"] if r["tool"] == "webmp" else r["dims"]["batch_size"]
    by.setdefault(b, {"webmp": [], "tinygrad": []})
    by[b][r["tool"]].append(r)
for b, d in sorted(by.items()):
    w = statistics.median(r["step"]["wall_ms_per_step"] for r in d["webmp"]) / 1e3
    t = statistics.median(r["step_s_median"] for r in d["tinygrad"])
    wf = d["webmp"][0]["first_step"]["total_s"]
    tf = d["tinygrad"][0]["time_to_first_step_s"]
    print(f"batch {b}: webmp mixed {w:.3f} s/step (first step {wf:.1f} s) on {d['webmp'][0]['adapter']}")
    print(f"batch {b}: tinygrad fp32 {t:.3f} s/step (block mean {d['tinygrad'][0]['step_s_block_mean']:.3f}; "
          f"first step {tf:.1f} s) on {d['tinygrad'][0]['adapter']['device']} ({d['tinygrad'][0]['adapter']['backend']})")
    print(f"batch {b}: webmp / tinygrad = {w / t:.3f}")
EOF
