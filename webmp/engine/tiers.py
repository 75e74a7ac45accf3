"""A plan's quick tier: twins of its first programs whose matmuls use the tiles that compile
fastest, for a runtime whose driver compiles each kernel at its first dispatch (lavapipe) to run
while the plan's own matmul kernels compile beside it.

Every matmul core and tile shape computes the same bits (webmp.ops.matmul_sources; the tuner relies
on it, tests/kernels/test_matmul.py checks it), so a step of a twin is the step of its program:
the same dispatches on the same buffers, only each matmul's kernel and its workgroup count differ.
On the GPT's page cold start the register core's 4 x 4 blocks (QUICK_TILES) compile in about half
the time of the shipped 16 x 4 ones (docs/benchmarks.md "Cold start"). web/runner.js runs a
program's twin from its first step, compiles the program's own kernels on its helper devices
meanwhile, and switches between two steps; the Python runtime runs the programs themselves.

  plan["quick"] = {program: twin}   the twins, programs of the plan named program + QUICK_SUFFIX
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from .plan import Dispatch, KernelSpec, Plan
from .tiles import SMALL_TILES, Tiles, TileTable

QUICK_SUFFIX = "@quick"
QUICK_TILES: Tiles = dict(SMALL_TILES)  # the register core's 4 x 4 blocks, sizes read at run time


class QuickTable(TileTable):
    """`table` with every matmul at QUICK_TILES: its forms (row kernels, weights, attention) and
    limits are kept, so the plan it builds has the same buffers and dispatches."""

    def __init__(self, table: TileTable):
        self.__dict__.update(table.__dict__)
        self.by_class = {}

    def for_shape(self, path: str, M: int, N: int, K: int, trans_a: int = 0, trans_b: int = 0) -> Tiles:
        return dict(QUICK_TILES)


def add_quick_tier(plan: Plan, quick: Plan, programs: Iterable[str]) -> list[str]:
    """Adds to `plan` the twins of `programs` from `quick` (the same model built with a QuickTable,
    a dry run will do) that differ from them, with the kernels they need that the plan lacks
    (named name + QUICK_SUFFIX); returns the programs that have a twin. ValueError where the
    two plans do not declare the same buffers (the twins would not be the same steps)."""

    def declared(p: Plan) -> list[dict[str, Any]]:
        return [{k: v for k, v in b.items() if k != "init"} for b in p["buffers"]]

    if declared(quick) != declared(plan):
        raise ValueError("the quick tier's plan has other buffers than the plan: not the same steps")

    def content(k: Mapping[str, Any]) -> str:
        return json.dumps({f: v for f, v in k.items() if f != "name"}, sort_keys=True)

    # a kernel of the quick plan that the plan has (the same contents, whatever its name) is shared
    mine = {content(k): k["name"] for k in plan["kernels"]}
    taken = {k["name"] for k in plan["kernels"]}
    theirs = {k["name"]: k for k in quick["kernels"]}
    names: dict[str, str] = {}  # the quick plan's kernel name -> the name in `plan`
    added: list[KernelSpec] = []
    twins: dict[str, str] = {}
    for program in programs:
        if program not in plan["programs"]:
            continue
        dispatches = quick["programs"][program]
        for d in dispatches:
            name = d["kernel"]
            if name in names:
                continue
            key = content(theirs[name])
            if key not in mine:
                new = name + QUICK_SUFFIX
                while new in taken:
                    new += "'"
                taken.add(new)
                added.append({**theirs[name], "name": new})
                mine[key] = new
            names[name] = mine[key]
        twin: list[Dispatch] = [{**d, "kernel": names[d["kernel"]]} for d in dispatches]
        if twin != plan["programs"][program]:
            plan["programs"][program + QUICK_SUFFIX] = twin
            twins[program] = program + QUICK_SUFFIX
    used = {d["kernel"] for twin in twins.values() for d in plan["programs"][twin]}
    plan["kernels"] += [k for k in added if k["name"] in used]
    if twins:
        plan["quick"] = twins
    return list(twins)
