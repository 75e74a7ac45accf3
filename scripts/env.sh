# Sourced by the Makefile: use the faster lavapipe / f16 Chromium from shared/tools/webgpu-cpu when set up.
export XDG_RUNTIME_DIR=${XDG_RUNTIME_DIR:-/tmp}
if [ -f /opt/webgpu-cpu/env.sh ]; then . /opt/webgpu-cpu/env.sh; unset VK_DRIVER_FILES; fi
