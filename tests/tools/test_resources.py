"""webmp.resources: the kernel files are found by file name through one index of shaders/**/*.wgsl."""

from __future__ import annotations

import pytest

from webmp import resources


@pytest.fixture
def shader_dir(tmp_path, monkeypatch):
    monkeypatch.setattr(resources, "SHADER_DIR", tmp_path)
    resources.shader_files.cache_clear()
    yield tmp_path
    resources.shader_files.cache_clear()  # the real index again for the next test


def test_every_shader_name_is_found_once_in_its_folder():
    files = resources.shader_files()
    assert len(files) > 40 and all(p.parent.parent == resources.SHADER_DIR for p in files.values())
    assert resources.shader_path("matmul_fwd.wgsl").parent.name == "matmuls"


def test_an_unknown_shader_is_named(shader_dir):
    (shader_dir / "rows").mkdir()
    (shader_dir / "rows" / "a.wgsl").write_text("")
    assert resources.shader_path("a.wgsl") == shader_dir / "rows" / "a.wgsl"
    with pytest.raises(FileNotFoundError, match="no shader 'b.wgsl' under"):
        resources.shader_path("b.wgsl")


def test_a_name_two_files_share_is_refused_naming_both(shader_dir):
    for folder in ("rows", "optim"):
        (shader_dir / folder).mkdir()
        (shader_dir / folder / "same.wgsl").write_text("")
    both = r"shader 'same.wgsl' is both .*optim/same.wgsl and .*rows/same.wgsl"
    with pytest.raises(ValueError, match=both):
        resources.shader_files()
