"""A typed client for arbor's HTTP API (``/v1``): start runs from named specs, follow their
event streams, decide approvals and answer questions, resume, page through listings.

The request and response models (:mod:`arbor_client.models`) are generated from the OpenAPI
document ``arbor serve`` publishes; the clients add what a generator does badly: event
streams as iterators that resume with ``Last-Event-ID``, waiting on a run, deciding, paging,
and errors as typed exceptions carrying ``kind``, ``field`` and ``limit``.

    from arbor_client import ArborClient

    with ArborClient("http://127.0.0.1:7700", token="…") as arbor:
        run = arbor.start_run("approvals")
        run = arbor.wait_run(run.root_id)
        for call in arbor.pending(run.root_id):
            arbor.approve(run.root_id, call.id)
        arbor.resume(run.root_id)
"""

from . import models
from ._async.client import AsyncArborClient
from ._sse import Event
from ._sync.client import ArborClient
from .errors import (
    ArborError,
    Conflict,
    LimitError,
    NotFound,
    StreamError,
    Unauthorized,
    Unavailable,
    ValidationError,
)

__all__ = [
    "ArborClient",
    "AsyncArborClient",
    "ArborError",
    "Conflict",
    "Event",
    "LimitError",
    "NotFound",
    "StreamError",
    "Unauthorized",
    "Unavailable",
    "ValidationError",
    "models",
]
