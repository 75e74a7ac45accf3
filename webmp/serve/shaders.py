"""The kernels' routes: /shaders/<name>, a kernel file by the name plans give it ("matmul_fwd.wgsl"),
whichever family folder of shaders/ holds it (webmp.resources.shader_path), nothing else; and
/shaders.json, every kernel file's text by that name (what the page's runner fetches)."""

from __future__ import annotations

import os

from fastapi.staticfiles import StaticFiles

from ..resources import SHADER_DIR, shader_files, shader_path


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


def shader_texts() -> dict[str, str]:
    """Every kernel file's text by its name, as /shaders/<name> serves it."""
    return {name: path.read_text() for name, path in shader_files().items()}
