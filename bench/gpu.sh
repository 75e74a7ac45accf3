#!/usr/bin/env bash
# The whole benchmark on a machine with a real GPU and Vulkan but no internet, from a copy of this
# working tree. Two steps:
#
#   bench/gpu.sh prepare         # here, with internet: Python wheels the GPU machine may lack go to
#                                # .whl/, the Vulkan loader's .deb packages to .gl/ (both git-ignored)
#   bench/gpu.sh [OUT_DIR] [webmp bench options...]
#                                # there: installs .whl/ into a private folder, unpacks .gl/ when
#                                # the system has no libvulkan, runs `webmp bench --size gpu
#                                # --tune --profile` and writes OUT_DIR/bench-gpu.json and .txt
#
# Environment: PYVER (prepare: the GPU machine's Python, default 3.12), SITE (run: where the
# wheels are installed, default /tmp/webmp-site), WEBMP_TUNE_CACHE (run: the auto-tune cache),
# WEBMP_BENCH_ALLOW_CPU=1 (run: accept a CPU adapter, to try the script without a GPU).
set -euo pipefail
cd "$(dirname "$0")/.."

# What `webmp bench` imports that a CUDA/PyTorch image usually lacks (numpy, scikit-learn,
# matplotlib, safetensors, tqdm and threadpoolctl are usually there).
WHEELS="wgpu cffi pycparser rendercanvas pydantic pydantic-core annotated-types typing-inspection"

pinned() {  # NAME==VERSION as installed here, so the GPU machine runs what was tested
  python3 - "$@" <<'EOF'
import sys
from importlib.metadata import version
print(" ".join(f"{n}=={version(n)}" for n in sys.argv[1:]))
EOF
}

if [[ "${1:-}" == "prepare" ]]; then
  pyver="${PYVER:-3.12}"
  rm -rf .whl && mkdir -p .whl
  # pip matches manylinux_2_N tags exactly, so name the common ones
  python3 -m pip download --no-deps --only-binary=:all: --python-version "$pyver" --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform any \
    -d .whl $(pinned $WHEELS)
  if command -v apt-get >/dev/null; then
    rm -rf .gl && mkdir -p .gl /tmp/webmp-apt/partial
    apt_opts=(-oAPT::Architecture=amd64 -oAPT::Architectures=amd64 -oDir::State::Lists=/tmp/webmp-apt)
    apt-get "${apt_opts[@]}" update -qq
    (cd .gl && apt-get "${apt_opts[@]}" download libvulkan1)
  fi
  ls -l .whl .gl 2>/dev/null || true
  echo "prepared: copy this working tree (with .whl/ and .gl/) to the GPU machine and run bench/gpu.sh there"
  exit 0
fi

out="${1:-bench-out}"
shift || true
mkdir -p "$out"

# Vulkan loader: the system's, else the one carried in .gl/ (unpacking into / needs root)
if ! ldconfig -p 2>/dev/null | grep -q 'libvulkan.so.1' && compgen -G ".gl/*.deb" >/dev/null; then
  for f in .gl/*.deb; do dpkg -x "$f" /; done
  ldconfig
fi
# NVIDIA containers often mount the driver's ICD manifest outside the loader's search path
nv_icd=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
if [[ -z "${VK_DRIVER_FILES:-}${VK_ICD_FILENAMES:-}" && -f "$nv_icd" ]] &&
   ! ls /usr/share/vulkan/icd.d/*nvidia* /etc/vulkan/icd.d/*nvidia* >/dev/null 2>&1; then
  export VK_DRIVER_FILES="$nv_icd"
fi

if compgen -G ".whl/*.whl" >/dev/null; then
  site="${SITE:-/tmp/webmp-site}"
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" .whl/*.whl
  export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-/tmp}"
export WEBMP_TUNE_CACHE="${WEBMP_TUNE_CACHE:-$PWD/$out/tune.json}"

python3 - <<'EOF'
import wgpu
a = wgpu.gpu.request_adapter_sync(power_preference="high-performance")
print("adapter:", a.summary if a else None)
import os
if a is None or (a.info.get("adapter_type") == "CPU" and not os.environ.get("WEBMP_BENCH_ALLOW_CPU")):
    raise SystemExit("bench/gpu.sh: no GPU adapter (Vulkan driver or loader missing?); not benchmarking a CPU")
EOF
python3 -m webmp.bench.cli --size gpu --tune --profile --out "$out/bench-gpu.json" "$@" 2> >(tee "$out/bench-gpu.log" >&2) \
  | tee "$out/bench-gpu.txt"
