"""What a browser run's plan may cost: a page's default WebGPU limits and the server's budget per plan,
checked before the plan is built; the cache of built plans.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from ..config import TrainConfig
from ..data.tables import Dataset
from ..data.text import TextCorpus
from ..engine.plan import Plan, h_bytes
from ..models.gpt import gpt_param_shapes, working_copies
from .errors import InvalidConfig

# A page's device gets WebGPU's default limits unless it asks for more, and can ask no more than its
# adapter offers; 128 MiB is the default maxStorageBufferBindingSize (and browsers' usual offer), so
# a plan whose largest buffer is above it would not run on most pages. The server budget bounds what
# one plan (buffer list and blob, held while the page fetches it) may cost: the blob holds the
# initial contents of the weights and the data, a fraction of the buffers' total.
MAX_BUFFER_BYTES = 128 * 2**20


MAX_PLAN_BYTES = 2**30  # 1 GiB of GPU buffers per run


def estimate_buffers(cfg: TrainConfig, data: Dataset | TextCorpus, path: str) -> dict[str, int]:
    """{buffer: bytes} of the plan build_plan(cfg, data, path) would make, from the config and the
    data's shape alone (no arrays, no blob): the parameters (master, gradient, two moments, working
    copy), the data and the activations, exactly as webmp/models sizes them; it leaves out the
    small buffers (state, flags, metrics ring, norm partials, LayerNorm stats, indices), so its total is a
    little under the plan's (tests/serve/test_server.py checks it against real plans)."""
    sizes: dict[str, int] = {}

    def f32(name: str, *shape: int) -> None:
        n = 4
        for d in shape:
            n *= d
        sizes[name] = max(4, n)

    def h(name: str, rows: int, cols: int) -> None:
        sizes[name] = max(4, h_bytes(rows, cols, path))

    def param(name: str, shape: tuple[int, ...], copy: bool) -> None:
        for prefix in ("", "g_", "m_", "v_"):
            f32(prefix + name, *shape)
        if copy:
            h("h_" + name, shape[0], shape[1])

    if isinstance(data, Dataset):
        f32("train_x", *data.train_x.shape)
        f32("train_y", *data.train_y.shape)
        f32("test_x", *data.test_x.shape)
        f32("test_y", *data.test_y.shape)
        B, dims = cfg.batch_size, [data.features, *cfg.hidden, data.classes]
        h("X", B, dims[0])
        for l in range(len(dims) - 1):
            param(f"W{l}", (dims[l], dims[l + 1]), True)
            param(f"b{l}", (dims[l + 1],), False)
            if l < len(dims) - 2:
                h(f"Z{l}", B, dims[l + 1])
                h(f"dZ{l}", B, dims[l + 1])
                if cfg.model == "mlp-ln":
                    param(f"ln_g{l}", (dims[l + 1],), False)
                    param(f"ln_b{l}", (dims[l + 1],), False)
                    h(f"Y{l}", B, dims[l + 1])
                    h(f"dY{l}", B, dims[l + 1])
            else:
                f32("logits", B, dims[-1])
                h("dlogits", B, dims[-1])
        return sizes
    V, D, T, H, L = data.vocab_size, cfg.d_model, cfg.context, cfg.n_head, cfg.n_layer
    R, Z = cfg.batch_size * T, cfg.batch_size * H
    f32("tokens", len(data.train))
    f32("val_tokens", max(1, min(len(data.val), cfg.val_tokens or len(data.val))))
    copied = working_copies(L, cfg.tie_head)
    for name, shape in gpt_param_shapes(V, D, L, T, cfg.tie_head).items():
        param(name, tuple(shape), name in copied)
    for l in range(L):
        for name, cols in (
            ("a", D),
            ("qkv", 3 * D),
            ("O", D),
            ("x_mid", D),
            ("m", D),
            ("z", 4 * D),
            ("x", D),
        ):
            h(f"{name}{l}", R, cols)
        h(f"P{l}", Z * T, T)
    h("X0", R, D)
    f32("S", Z * T, T)
    h("xf", R, D)
    f32("logits", R, V)
    h("dlogits", R, V)
    for name, cols in (("dx", D), ("dY", D), ("dln", D), ("dO", D), ("dqkv", 3 * D), ("dz", 4 * D)):
        h(name, R, cols)
    h("dS", Z * T, T)
    return sizes


def check_plan_size(cfg: TrainConfig, data: Dataset | TextCorpus) -> None:
    """InvalidConfig (naming the numbers) when the run's plan would not fit a page's default
    WebGPU limits (MAX_BUFFER_BYTES) or the server's budget for one plan (MAX_PLAN_BYTES); the
    'native' and 'emulated' paths size their buffers alike, so one estimate answers for both."""
    sizes = estimate_buffers(cfg, data, "fp32" if cfg.precision == "fp32" else "native")
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
