"""What a request about a browser run can be refused for: the PageRunError family (webmp/serve/api.py
maps each to an HTTP status, webmp/serve/sockets.py to a WebSocket reply).
"""

from __future__ import annotations


class PageRunError(Exception):
    """A request about a page run that cannot be honoured; the message says why."""


class UnknownRun(PageRunError):
    pass


class RunStateConflict(PageRunError):
    """The request does not fit the run's current status or configuration."""


class InvalidUpload(PageRunError):
    pass


class InvalidConfig(PageRunError):
    """A valid TrainConfig that a browser run cannot train."""


class InvalidData(PageRunError):
    """An uploaded data file the loaders refuse (their one line)."""


class TooLarge(PageRunError):
    """More than the server keeps (an upload beyond what its uploads may hold in all)."""


class InvalidSample(PageRunError):
    """Text generation settings or a prompt that cannot be used (webmp.sample.job's SampleError)."""
