"""What a training page reports, checked before its run stores it (webmp/serve/runs.py): its records,
stored once each in step order (`PendingRecords` holds those that came before an earlier step's),
and the gradient-range lens's counts, checked against the plan and appended to histograms.jsonl
with each layer's shares against f16's range (`RunLens`).
"""

from __future__ import annotations

from typing import Any

from ..engine.plan import Plan
from ..train.format_lens import format_shares
from ..train.rundir import Record, RunDir, histogram_line, histogram_shares, json_safe, scale_shift
from .errors import InvalidUpload
from .messages import Histograms

MAX_PENDING = 100_000  # records held back waiting for an earlier step


class PendingRecords:
    """Records that came before an earlier step's, held until the gap fills."""

    def __init__(self) -> None:
        self.held: dict[int, Record] = {}

    def add(self, records: list[Record], last_step: int) -> tuple[list[Record], int]:
        """(the records that now follow `last_step` without a gap, in order; duplicates: those
        stored or held already). InvalidUpload, dropping every held record, past MAX_PENDING."""
        dups = 0
        for r in records:
            if r["step"] <= last_step or r["step"] in self.held:
                dups += 1
            else:
                self.held[r["step"]] = r
        if len(self.held) > MAX_PENDING:
            self.held.clear()
            raise InvalidUpload("too many records waiting for an earlier step; dropped them")
        ready: list[Record] = []
        while last_step + len(ready) + 1 in self.held:
            ready.append(self.held.pop(last_step + len(ready) + 1))
        return ready, dups

    def clear(self) -> None:
        self.held.clear()

    def drain(self) -> list[Record]:
        """Every held record, in step order (a page that left: all received are kept)."""
        records = [self.held[s] for s in sorted(self.held)]
        self.held.clear()
        return records


class RunLens:
    """The lens's reads of one run: histograms.jsonl in `run_dir`, and the step of its last line."""

    def __init__(self, run_dir: RunDir):
        self.dir = run_dir
        self.step = self._last_step()

    def _last_step(self) -> int | None:
        lines = self.dir.read_histograms()
        return int(lines[-1]["step"]) if lines else None

    def reload(self) -> None:
        """After the metrics were cut back for a resume (histograms.jsonl is cut with them)."""
        self.step = self._last_step()

    def check(self, lens: Histograms, plan: Plan, records: list[Record], stored: list[Record]) -> Record:
        """The record of the lens's step, if its counts fit the plan (a list per layer, of its bucket
        count, adding up to the layer's rows x cols values), its step's record is `stored` or among
        `records` (those of the same message) and it comes after the last stored histograms; else
        InvalidUpload naming what is wrong."""
        spec = plan["histograms"]
        if len(lens.counts) != len(spec["layers"]):
            raise InvalidUpload(
                f"histograms for {len(lens.counts)} layers; the plan has {len(spec['layers'])}"
            )
        for counts, lay in zip(lens.counts, spec["layers"], strict=True):
            values = lay["shape"][0] * lay["shape"][1]
            if len(counts) != spec["buckets"] or sum(counts) != values:
                raise InvalidUpload(
                    f"histograms of layer {lay['name']}: {len(counts)} counters adding up to {sum(counts)}; "
                    f"the plan's lens has {spec['buckets']} adding up to its {values} values"
                )
        record = next((r for r in [*records, *reversed(stored)] if r["step"] == lens.step), None)
        if record is None:
            raise InvalidUpload(
                f"histograms of step {lens.step}, whose record is neither stored nor sent with them"
            )
        if self.step is not None and lens.step <= self.step:
            raise InvalidUpload(f"histograms of step {lens.step} after those of step {self.step}")
        return record

    def store(self, lens: Histograms, plan: Plan, record: Record) -> dict[str, Any]:
        """Append checked counts (`check`) to histograms.jsonl with their step's scale; each layer's
        shares against f16's range, as stored and unscaled (rundir.histogram_shares), and against
        every format's (format_lens.format_shares)."""
        spec = plan["histograms"]
        names = [lay["name"] for lay in spec["layers"]]
        layers = list(zip(names, lens.counts, strict=True))
        self.dir.append_histograms(
            histogram_line(lens.step, record["scale"], spec["e_min"], spec["e_max"], layers)
        )
        self.step = lens.step
        shift = scale_shift(record["scale"])
        shares = [
            {
                "name": name,
                "stored": histogram_shares(c, spec["e_min"], spec["e_max"]),
                "unscaled": histogram_shares(c, spec["e_min"], spec["e_max"], shift),
                "formats": format_shares(c, spec["e_min"], spec["e_max"], shift),
            }
            for name, c in layers
        ]
        # json_safe: a page's NaN scale
        return json_safe({"step": lens.step, "scale": record["scale"], "shares": shares})
