"""The kernels' route, /shaders/<name>: a kernel file by the name plans give it ("matmul_fwd.wgsl"),
whichever family folder of shaders/ holds it (webmp.resources.shader_path); nothing else."""

from __future__ import annotations

import os

from fastapi.staticfiles import StaticFiles

from ..resources import SHADER_DIR, shader_path


class ShaderFiles(StaticFiles):
    """StaticFiles (its headers, HEAD and conditional requests) over the index of shader names: any
    other path, a folder's file by its path included, is a 404."""

    def __init__(self) -> None:
        super().__init__(directory=SHADER_DIR)

    def lookup_path(self, path: str) -> tuple[str, os.stat_result | None]:
        try:
            file = shader_path(path)
        except FileNotFoundError:
            return "", None
        return str(file), os.stat(file)
