"""Text generation for a finished GPT run's page: the sampling plan of its final checkpoint, built with
webmp/sample/job.py, the code of `webmp sample` (the page replays it in web/runner.js and decodes the
tokens with the plan's vocabulary). The settings are checked by webmp.sample.job.SampleSettings, as
`webmp sample` checks its flags; the page's limits (MAX_PAGE_TOKENS, MAX_PAGE_PROMPT) are the
server's own.
"""

from __future__ import annotations

from typing import Any

from ..engine.plan import SamplePlan
from ..sample.job import SampleError, SampleJob, SampleSettings, prepare
from ..train.rundir import RunDir
from .errors import InvalidSample, RunStateConflict
from .form import MAX_PAGE_PROMPT, MAX_PAGE_TOKENS
from .messages import Offer


def page_settings(
    prompt: str, tokens: str | None = None, temperature: str | None = None, seed: str | None = None
) -> SampleSettings:
    """The settings of a page's query (text, as a URL carries them; None: `webmp sample`'s
    defaults), within the page's limits; InvalidSample in one line."""
    try:
        settings = SampleSettings.of(tokens=tokens, temperature=temperature, seed=seed)
    except SampleError as e:
        raise InvalidSample(str(e)) from None
    if settings.tokens > MAX_PAGE_TOKENS:
        raise InvalidSample(f"tokens must be at most {MAX_PAGE_TOKENS} on the page, got {settings.tokens}")
    if len(prompt) > MAX_PAGE_PROMPT:
        raise InvalidSample(f"the prompt must be at most {MAX_PAGE_PROMPT} characters, got {len(prompt)}")
    return settings


Sampled = tuple[SamplePlan, bytes, SampleJob]


class RunSampler:
    """The sampling plans of one run directory, the last one kept for the blob request after it."""

    def __init__(self, run_dir: RunDir):
        self.dir = run_dir
        self.kept: tuple[tuple[Any, ...], Sampled] | None = None

    def plan(
        self, offer: Offer, prompt: str, settings: SampleSettings, checkpoint_step: int | None, keep: bool
    ) -> Sampled:
        """The sampling plan of the run's checkpoint (`checkpoint_step`, its final one) for a page
        whose adapter has ('native') or lacks ('emulated') shader-f16, built as `webmp sample`
        builds it (default matmul tiles, like the training plans); InvalidSample (one line) for a
        prompt outside the vocabulary. With `keep` the plan is kept for the blob request that
        follows it, which passes keep=False (so a run holds no blob once the page has it). Runs in
        a worker thread."""
        key = (offer, prompt, settings, checkpoint_step)
        kept, self.kept = self.kept, None
        if kept is not None and kept[0] == key:
            self.kept = kept if keep else None
            return kept[1]
        try:
            job = prepare(self.dir.path, prompt, **settings.model_dump())
            path = job.path(offer == "native")
        except SampleError as e:
            raise InvalidSample(str(e)) from None
        except RuntimeError as e:  # f16 'native' asked of an adapter without shader-f16
            raise RunStateConflict(str(e)) from None
        plan, blob = job.plan(path)
        if keep:
            self.kept = (key, (plan, blob, job))
        return plan, blob, job
