"""What a browser run's plan may cost: a page's default WebGPU limits and the server's budget per plan,
checked before the plan is built; the cache of built plans.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from ..config import TrainConfig
from ..data.tables import Dataset
from ..data.text import TextCorpus
from ..engine.plan import Plan
from ..models import plan_buffers
from .errors import InvalidConfig

# A page's device gets WebGPU's default limits unless it asks for more, and can ask no more than its
# adapter offers; 128 MiB is the default maxStorageBufferBindingSize (and browsers' usual offer), so
# a plan whose largest buffer is above it would not run on most pages. The server budget bounds what
# one plan (buffer list and blob, held while the page fetches it) may cost: the blob holds the
# initial contents of the weights and the data, a fraction of the buffers' total.
MAX_BUFFER_BYTES = 128 * 2**20
MAX_PLAN_BYTES = 2**30  # 1 GiB of GPU buffers per run


def estimate_buffers(cfg: TrainConfig, data: Dataset | TextCorpus, path: str) -> dict[str, int]:
    """{buffer: bytes} of every buffer the plan build_plan(cfg, data, path) declares, exactly: the
    models' own declarations, from a dry run (webmp.models.plan_buffers: no arrays, no blob).
    ValueError when the models refuse the config (a shape they cannot make, a launcher's limit)."""
    return {b["name"]: b["bytes"] for b in plan_buffers(cfg, data, path)}


def check_plan_size(cfg: TrainConfig, data: Dataset | TextCorpus) -> None:
    """InvalidConfig (naming the numbers) when the run's plan would not fit a page's default
    WebGPU limits (MAX_BUFFER_BYTES) or the server's budget for one plan (MAX_PLAN_BYTES), or
    cannot be built at all; the 'native' and 'emulated' paths size their buffers alike, so one
    estimate answers for both."""
    try:
        sizes = estimate_buffers(cfg, data, "fp32" if cfg.precision == "fp32" else "native")
    except ValueError as e:
        raise InvalidConfig(f"this config makes no plan: {e}") from None
    name = max(sizes, key=lambda n: sizes[n])
    total = sum(sizes.values())
    mib = 2**20
    if sizes[name] > MAX_BUFFER_BYTES:
        raise InvalidConfig(
            f"this config's largest GPU buffer, {name}, would be {sizes[name]} bytes "
            f"({sizes[name] / mib:.1f} MiB); a page's WebGPU device holds at most "
            f"{MAX_BUFFER_BYTES} bytes ({MAX_BUFFER_BYTES // mib} MiB) in one buffer"
        )
    if total > MAX_PLAN_BYTES:
        raise InvalidConfig(
            f"this config's GPU buffers would total {total} bytes ({total / mib:.1f} MiB); "
            f"the server serves plans of at most {MAX_PLAN_BYTES} bytes ({MAX_PLAN_BYTES // mib} MiB)"
        )


# Built plans are kept for the page's next requests (the plan, then its blob, then checkpoint
# uploads and the summary): at most this many across all runs, the least recently used dropped (a
# dropped one is rebuilt on demand, a GPT's in about a second). A plan within MAX_PLAN_BYTES has a
# blob of a few hundred MB at most (weights and data), so the cache stays around a GB or below.
MAX_CACHED_PLANS = 4
PlanKey = tuple[str, str, str | None]  # run id, f16 path, the page's adapter key for tuned tiles


class PlanCache:
    """Built (plan, blob)s by PlanKey, least recently used first; shared by a store's runs and used
    from worker threads (hence the lock; two threads may build the same plan once each)."""

    def __init__(self, size: int = MAX_CACHED_PLANS):
        self.size = size
        self._lock = threading.Lock()
        self._plans: OrderedDict[PlanKey, tuple[Plan, bytes]] = OrderedDict()

    def get(self, key: PlanKey) -> tuple[Plan, bytes] | None:
        with self._lock:
            built = self._plans.get(key)
            if built is not None:
                self._plans.move_to_end(key)
            return built

    def put(self, key: PlanKey, built: tuple[Plan, bytes]) -> None:
        with self._lock:
            self._plans[key] = built
            self._plans.move_to_end(key)
            while len(self._plans) > self.size:
                self._plans.popitem(last=False)

    def drop(self, run_id: str) -> None:
        with self._lock:
            for key in [k for k in self._plans if k[0] == run_id]:
                del self._plans[key]

    def keys(self) -> list[PlanKey]:
        with self._lock:
            return list(self._plans)
