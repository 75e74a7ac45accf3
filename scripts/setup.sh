#!/usr/bin/env bash
# Installs what webmp needs on a Debian machine (run as root; idempotent, quick when all is there).
#   scripts/setup.sh train   Python package + a Vulkan driver when the best WebGPU adapter is not
#                            Vulkan/Metal/D3D12 (wgpu falls back to OpenGL, without shader-f16)
#   scripts/setup.sh test    the above, plus test deps, Open MPI (mpi4py builds against it; the
#                            2-rank tests), Chromium, the chart library and, when
#                            ../shared/tools/webgpu-cpu exists, the faster lavapipe + f16 Chromium
#   scripts/setup.sh mpi     train, plus Open MPI and mpi4py: `mpirun -n N webmp train ...`
set -euo pipefail
mode=${1:-train}
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
say() { printf 'setup: %s\n' "$*" >&2; }

apt_install() {
  local missing=()
  for p in "$@"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
  [ ${#missing[@]} -eq 0 ] && return 0
  say "apt-get install ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# Debian 12's own lavapipe is Mesa 22.3; Debian's bookworm-backports archive has Mesa 25, whose
# lavapipe runs webmp's kernels several times faster (docs/benchmarks.md "Vulkan driver"). On Debian 12
# the backports' Mesa is installed (its source added if missing) unless WEBMP_NO_BACKPORTS=1; when it
# cannot be had, the release's Mesa is installed and setup says so.
vulkan_driver() {
  local codename have
  codename=$(. /etc/os-release 2>/dev/null && echo "${VERSION_CODENAME:-}")
  if [ "$codename" != bookworm ] || [ "${WEBMP_NO_BACKPORTS:-0}" = 1 ]; then
    apt_install mesa-vulkan-drivers libvulkan1
    return
  fi
  have=$(dpkg-query -W -f='${Version}' mesa-vulkan-drivers 2>/dev/null || true)
  if [ -n "$have" ] && dpkg --compare-versions "$have" ge 25; then
    apt_install libvulkan1
    return
  fi
  if ! grep -rqs bookworm-backports /etc/apt/sources.list /etc/apt/sources.list.d/; then
    say "adding Debian's bookworm-backports archive (/etc/apt/sources.list.d/webmp-backports.sources)"
    printf '%s\n' 'Types: deb' 'URIs: http://deb.debian.org/debian' 'Suites: bookworm-backports' \
      'Components: main' 'Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg' \
      > /etc/apt/sources.list.d/webmp-backports.sources
  fi
  say "apt-get install -t bookworm-backports mesa-vulkan-drivers (Mesa ${have:-not installed} -> Mesa 25's faster lavapipe)"
  export DEBIAN_FRONTEND=noninteractive
  if ! { apt-get update -qq >/dev/null &&
    apt-get install -y -qq --no-install-recommends -t bookworm-backports mesa-vulkan-drivers libvulkan1 >/dev/null; }; then
    say "Mesa from bookworm-backports could not be installed: installing Debian 12's Mesa 22 (a slower lavapipe)"
    apt_install mesa-vulkan-drivers libvulkan1
  fi
}

case "$mode" in train | test | mpi) ;; *) say "unknown mode '$mode' (train, test or mpi)"; exit 2 ;; esac
py=${PYTHON:-python3}
extra=""; [ "$mode" = test ] && extra="[test]"; [ "$mode" = mpi ] && extra="[mpi]"
# mpi4py compiles against an MPI library: install it before pip runs
[ "$mode" != train ] && apt_install openmpi-bin libopenmpi-dev
# pip runs again only when pyproject.toml changed since the last install from this checkout, or when
# webmp (or a test tool) is missing or installed from elsewhere: it costs ~15 s even with nothing to do
stamp=".webmp-cache/installed-$mode"
want="$(sha256sum pyproject.toml | cut -d' ' -f1) $root"
check="import webmp, wgpu, fastapi, safetensors, sklearn, sys; sys.exit(not webmp.__file__.startswith('$root/'))"
[ "$mode" = test ] && check="import pytest, playwright, xdist, mypy, ruff, mpi4py; $check"
[ "$mode" = mpi ] && check="import mpi4py; $check"
# (checked from / : from here, `import webmp` would find this checkout whatever pip installed)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ] || ! (cd / && $py -c "$check" 2>/dev/null); then
  say "pip install -e .$extra"
  $py -m pip install -q --disable-pip-version-check --root-user-action=ignore -e ".$extra"
  mkdir -p .webmp-cache && echo "$want" > "$stamp"
fi

# PyTorch for tests/models/test_torch_parity.py (the same models trained in PyTorch from identical initial
# weights): pinned to the CPU build this project tested, which pip finds on this project's machines;
# where it cannot be installed those tests skip, saying why
# (found, not imported: importing torch costs ~2 s, and make check runs this first)
if [ "$mode" = test ] && ! (cd / && $py -c "import importlib.util as u, sys; sys.exit(not u.find_spec('torch'))"); then
  say "pip install torch==2.13.0 (the PyTorch parity tests)"
  $py -m pip install -q --disable-pip-version-check --root-user-action=ignore "torch==2.13.0" ||
    say "PyTorch was not installed: tests/models/test_torch_parity.py will be skipped"
fi

export XDG_RUNTIME_DIR=${XDG_RUNTIME_DIR:-/tmp}
# wgpu falls back to its OpenGL backend when no Vulkan driver is installed (on Debian: llvmpipe
# through GL, without shader-f16); the engine wants Vulkan, Metal or D3D12, and on a CPU adapter
# (lavapipe) the fastest Mesa at hand
best_backend="import wgpu, sys; a = wgpu.gpu.request_adapter_sync(); sys.exit(a is None or a.info['backend_type'] not in ('Vulkan', 'Metal', 'D3D12'))"
cpu_adapter="import wgpu, sys; a = wgpu.gpu.request_adapter_sync(); sys.exit(a.info['adapter_type'] != 'CPU')"
if ! $py -c "$best_backend" >/dev/null 2>&1; then
  say "no Vulkan/Metal/D3D12 WebGPU adapter found: installing Mesa's lavapipe Vulkan driver"
  vulkan_driver
elif [ "$mode" = test ] || $py -c "$cpu_adapter" >/dev/null 2>&1; then
  vulkan_driver
fi

if [ "$mode" = test ]; then
  apt_install chromium fonts-dejavu-core
  if [ ! -f web/node_modules/uplot/package.json ]; then
    command -v npm >/dev/null 2>&1 || apt_install npm
    say "npm ci (uPlot, the page's chart library, from web/package-lock.json)"
    npm ci --prefix web --no-audit --no-fund --loglevel=error >/dev/null
  fi
  tool="$root/../shared/tools/webgpu-cpu/setup.sh"
  if [ -f "$tool" ] && [ ! -f /opt/webgpu-cpu/env.sh ]; then
    say "setting up the faster lavapipe and an f16 WebGPU Chromium (shared/tools/webgpu-cpu)"
    bash "$tool" /opt/webgpu-cpu >/dev/null 2>&1 || say "webgpu-cpu setup failed; tests use Debian's Chromium (emulated f16) and stock lavapipe"
  fi
fi
