"""The client of ``arbor serve``, over httpx.

This file is the asynchronous client's source; the synchronous client (``_sync/client.py``)
is generated from it by ``unasync`` (``bash clients/generate.sh``): edit this one only.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping, Sequence
from time import monotonic
from typing import Any

import httpx
import pydantic

from .. import _ops as ops
from .. import models as m
from .._sse import Event, Parser
from ..errors import ArborError, StreamError, Unavailable, raise_for

#: How long a broken event stream is resumed (``Last-Event-ID``) without progress, seconds.
RECONNECT_SECONDS = 60
#: A stream silent this long (the server's keep-alive is every 15 s) is taken as broken.
STREAM_SILENCE = 45.0
#: Answers to a stream request that a restarting server or proxy gives: retried (a 429 only
#: on a reconnect).
RETRIED = frozenset({429, 502, 503, 504})


class AsyncArborClient:
    """A client of one ``arbor serve``. Each method is one request and returns the model the
    OpenAPI document names for its answer; a failure raises an
    :class:`~arbor_client.errors.ArborError` carrying ``kind``, ``field`` and ``limit``.

    ``iter_*`` methods page through a listing; ``events``, ``tree_events`` and ``feed``
    follow event streams, resuming with ``Last-Event-ID`` when a connection breaks;
    ``wait_run`` waits for a run to stop. (``AsyncArborClient``: the same, awaited, its
    iterators async; ``ArborClient``: the same, blocking.)
    """

    def __init__(
        self,
        base_url: str = "http://127.0.0.1:7700",
        *,
        token: str | None = None,
        timeout: float = 30.0,
        http: httpx.AsyncClient | None = None,
    ) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = http or httpx.AsyncClient(
            base_url=base_url, headers=headers, timeout=timeout
        )

    async def close(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncArborClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _send(self, call: ops.Call) -> Any:
        extra = {"timeout": call.timeout} if call.timeout is not None else {}
        try:
            response = await self._http.request(
                call.method,
                call.path,
                params=dict(call.params),
                json=call.json,
                headers=dict(call.headers),
                **extra,
            )
        except httpx.TransportError as e:
            raise Unavailable(
                f"{call.method} {call.path}: {e or type(e).__name__}",
                kind="unavailable",
                status=0,
            ) from e
        raise_for(response)
        return call.parse(response.status_code, response.json())

    # Runs.

    async def specs(self) -> list[str]:
        """The names of the specs the server can start."""
        return await self._send(ops.specs())

    async def start_run(
        self,
        spec: str | None = None,
        task: str | None = None,
        *,
        labels: Mapping[str, str] | None = None,
        budget: m.BudgetRequest | Mapping[str, Any] | None = None,
        controls: m.ControlsSchema | Mapping[str, Any] | None = None,
        idempotency_key: str | None = None,
        **extra: Any,
    ) -> m.RunView:
        """Starts a root run of the named ``spec`` (on ``task``, else the spec's own)."""
        return await self._send(
            ops.start_run(spec, task, labels, budget, controls, idempotency_key, extra)
        )

    async def run(self, run_id: str) -> m.RunView:
        """A run: its root's status, its tree, its result once it has one."""
        return await self._send(ops.run(run_id))

    async def runs(
        self,
        *,
        limit: int | None = None,
        cursor: str | None = None,
        status: str | None = None,
        spec: str | None = None,
        label: str | None = None,
        created_after: int | None = None,
        created_before: int | None = None,
    ) -> m.RunList:
        """One page of this tenant's runs, newest first."""
        return await self._send(
            ops.runs(
                limit=limit,
                cursor=cursor,
                status=status,
                spec=spec,
                label=label,
                created_after=created_after,
                created_before=created_before,
            )
        )

    async def iter_runs(
        self, *, page_size: int | None = None, **filters: Any
    ) -> AsyncIterator[m.RunSummary]:
        """Every run the filters of :meth:`runs` select, page after page."""
        cursor: str | None = None
        while True:
            page = await self.runs(limit=page_size, cursor=cursor, **filters)
            for r in page.runs:
                yield r
            if not page.next_cursor:
                return
            cursor = page.next_cursor

    async def wait_run(
        self, run_id: str, *, timeout: float = 60.0, poll: float = 0.05
    ) -> m.RunView:
        """Waits until the run stops (it answered, failed, or waits for a decision) and
        returns it; ``TimeoutError`` past ``timeout`` seconds."""
        deadline = monotonic() + timeout
        while True:
            view = await self.run(run_id)
            # Its result is kept when its run ends (and dropped when a resume starts it
            # again); a run a crash interrupted has none.
            if view.status in ops.SETTLED and (
                view.result is not None or view.status == "interrupted"
            ):
                return view
            if monotonic() >= deadline:
                raise TimeoutError(
                    f"run {run_id} still {view.status} after {timeout} s"
                )
            await asyncio.sleep(poll)

    async def resume(self, run_id: str) -> m.ResumeView:
        """Resumes a run whose waiting calls are all decided (or one a crash interrupted)."""
        return await self._send(ops.resume(run_id))

    # Sessions.

    async def session(self, session_id: str) -> m.SessionView:
        return await self._send(ops.session(session_id))

    async def children(
        self,
        session_id: str,
        *,
        limit: int | None = None,
        cursor: str | None = None,
        status: str | None = None,
    ) -> m.ChildrenView:
        return await self._send(
            ops.children(session_id, limit=limit, cursor=cursor, status=status)
        )

    async def iter_children(
        self,
        session_id: str,
        *,
        page_size: int | None = None,
        status: str | None = None,
    ) -> AsyncIterator[m.SessionView]:
        cursor: str | None = None
        while True:
            page = await self.children(
                session_id, limit=page_size, cursor=cursor, status=status
            )
            for c in page.children:
                yield c
            if not page.next_cursor:
                return
            cursor = page.next_cursor

    async def transcript(
        self, session_id: str, *, after: int | None = None, limit: int | None = None
    ) -> m.TranscriptPage:
        return await self._send(ops.transcript(session_id, after, limit))

    async def iter_transcript(
        self, session_id: str, *, after: int | None = None, page_size: int | None = None
    ) -> AsyncIterator[dict[str, Any]]:
        """Every transcript entry after ``after``, oldest first."""
        while True:
            page = await self.transcript(session_id, after=after, limit=page_size)
            for e in page.entries:
                yield e
            if page.next_after is None:
                return
            after = page.next_after

    async def cancel(self, session_id: str) -> m.CancelView:
        return await self._send(ops.cancel(session_id))

    async def delete(
        self, session_id: str, *, reason: str | None = None
    ) -> m.DeletedView:
        return await self._send(ops.delete(session_id, reason))

    # Coding children's work: the caller is the approver.

    async def diff(
        self,
        session_id: str,
        *,
        offset: int | None = None,
        max_bytes: int | None = None,
    ) -> m.DiffView:
        """What a coding child's branch changes against the main checkout now."""
        return await self._send(ops.diff(session_id, offset, max_bytes))

    async def merge(
        self,
        session_id: str,
        *,
        strategy: str | None = None,
        expect_tip: str | None = None,
    ) -> m.MergeView:
        """Merges a finished coding child's branch (only at ``expect_tip``, when given)."""
        return await self._send(ops.merge(session_id, strategy, expect_tip))

    async def discard(self, session_id: str) -> m.DiscardView:
        """Throws a finished coding child's worktree and branch away."""
        return await self._send(ops.discard(session_id))

    # Approvals and questions.

    async def approvals(
        self, session_id: str, *, limit: int | None = None, cursor: str | None = None
    ) -> m.ApprovalsView:
        return await self._send(ops.approvals(session_id, limit, cursor))

    async def pending(self, session_id: str) -> list[m.PendingView]:
        """Every call waiting for a decision at the session, over every page."""
        out: list[m.PendingView] = []
        cursor: str | None = None
        while True:
            page = await self.approvals(session_id, cursor=cursor)
            for s in page.suspensions:
                out.extend(s.pending)
            if not page.next_cursor:
                return out
            cursor = page.next_cursor

    async def decide(
        self,
        session_id: str,
        decisions: Sequence[m.DecisionInput | Mapping[str, Any]],
        *,
        by: str | None = None,
    ) -> m.SuspensionView:
        """Records decisions (all on calls of one suspended run); returns what still waits."""
        return await self._send(ops.decide(session_id, decisions, by))

    async def approve(
        self,
        session_id: str,
        pending_id: str,
        *,
        reason: str | None = None,
        for_run: bool = False,
        by: str | None = None,
    ) -> m.SuspensionView:
        return await self.decide(
            session_id, [ops.verdict(pending_id, "allow", for_run, reason)], by=by
        )

    async def reject(
        self,
        session_id: str,
        pending_id: str,
        *,
        reason: str | None = None,
        for_run: bool = False,
        by: str | None = None,
    ) -> m.SuspensionView:
        return await self.decide(
            session_id, [ops.verdict(pending_id, "reject", for_run, reason)], by=by
        )

    async def answer(
        self, session_id: str, pending_id: str, text: str, *, by: str | None = None
    ) -> m.SuspensionView:
        """Answers a question an agent asked (``ask_human``)."""
        return await self.decide(
            session_id, [{"id": pending_id, "answer": text}], by=by
        )

    # A host acting as a parent.

    async def spawn(
        self, session_id: str, request: m.SpawnRequest | Mapping[str, Any]
    ) -> m.HandleView | m.AnswerView | m.DelegationState:
        return await self._send(ops.spawn(session_id, request))

    async def delegation(
        self, session_id: str, delegation_id: str, *, wait_ms: int | None = None
    ) -> m.AnswerView | m.DelegationState:
        return await self._send(ops.delegation(session_id, delegation_id, wait_ms))

    async def cancel_delegation(
        self, session_id: str, delegation_id: str
    ) -> m.DelegationState:
        return await self._send(ops.end_delegation(session_id, delegation_id, "cancel"))

    async def stop_delegation(
        self, session_id: str, delegation_id: str
    ) -> m.DelegationState:
        return await self._send(ops.end_delegation(session_id, delegation_id, "stop"))

    async def message(
        self, session_id: str, request: m.MessageRequest | Mapping[str, Any]
    ) -> m.ReceiptView:
        return await self._send(ops.message(session_id, request))

    # Event streams.

    async def events(
        self,
        session_id: str,
        *,
        since: int | None = None,
        last_event_id: str | None = None,
    ) -> AsyncIterator[Event]:
        """A session's transcript entries (``event`` = the entry's type, ``id`` = its
        sequence number) and status changes (``status``), until ``end``, which is the last
        event yielded. A broken connection is resumed with the last id seen."""
        params = ops._params(since=since)
        async for event in self._follow(
            f"/v1/sessions/{ops._seg(session_id)}/events", params, last_event_id
        ):
            yield event

    async def tree_events(
        self, run_id: str, *, last_event_id: str | None = None
    ) -> AsyncIterator[m.TreeSnapshot]:
        """Whole-tree snapshots of a run, at once and on every change, until the tree ends."""
        async for event in self._follow(
            f"/v1/runs/{ops._seg(run_id)}/events", {}, last_event_id
        ):
            if event.event == "tree":
                yield m.TreeSnapshot.model_validate(event.data)

    async def feed(
        self, *, since: int | None = None, last_event_id: str | None = None
    ) -> AsyncIterator[m.FeedEntry1 | m.FeedEntry2 | m.FeedEntry3]:
        """The tenant's event feed (runs changing status, approvals waiting and decided),
        live; pass ``since`` (0: from the start) to replay what was logged before. An event of
        a kind this client does not know is skipped."""
        params = ops._params(since=since)
        async for event in self._follow("/v1/events", params, last_event_id):
            if event.id is None:
                continue
            try:
                yield m.FeedEntry.model_validate(event.data).root
            except pydantic.ValidationError:
                continue

    async def _follow(
        self, path: str, params: Mapping[str, Any], last_event_id: str | None
    ) -> AsyncIterator[Event]:
        # Broken connections, closes without `end`, a server restarting (`end` with reason
        # `shutdown`, 502/503/504, a 429 while the old stream still holds its slot) are
        # resumed with the last id seen, for up to RECONNECT_SECONDS without progress.
        tries = 0
        stuck_since: float | None = None
        why = ""
        while True:
            if (
                stuck_since is not None
                and monotonic() - stuck_since > RECONNECT_SECONDS
            ):
                raise StreamError(
                    f"the event stream {path} could not be resumed for "
                    f"{RECONNECT_SECONDS} s ({tries} tries): {why}",
                    kind="unavailable",
                    status=0,
                )
            if tries:
                await asyncio.sleep(min(0.1 * 2**tries, 2.0))
            headers = {"Last-Event-ID": last_event_id} if last_event_id else {}
            try:
                async with self._http.stream(
                    "GET",
                    path,
                    params=dict(params),
                    headers=headers,
                    # The server sends a keep-alive every 15 s: a silence past this is a
                    # connection that died without closing.
                    timeout=httpx.Timeout(30.0, read=STREAM_SILENCE),
                ) as response:
                    # A 429 on the first try is the tenant's limit (raised); on a reconnect
                    # it is the old stream still holding its slot (retried).
                    if response.status_code in RETRIED and (
                        response.status_code != 429 or tries > 0
                    ):
                        await response.aread()
                        why = f"HTTP {response.status_code}"
                    elif not response.is_success:
                        await response.aread()
                        raise_for(response)
                    else:
                        parser = Parser()
                        async for line in response.aiter_lines():
                            event = parser.feed(line)
                            if (
                                parser.last_id is not None
                                and parser.last_id != last_event_id
                            ):
                                # Progress: the budget starts again.
                                last_event_id = parser.last_id
                                tries, stuck_since = 0, None
                            if event is None:
                                continue
                            if event.event == "end":
                                reason = (
                                    event.data.get("reason")
                                    if isinstance(event.data, dict)
                                    else None
                                )
                                if reason == "shutdown":
                                    why = "the server shut down"
                                    break
                                yield event
                                return
                            yield event
                        else:
                            why = "the stream closed without its end"
            except ArborError:
                raise
            except httpx.TransportError as e:
                why = str(e) or type(e).__name__
            tries += 1
            if stuck_since is None:
                stuck_since = monotonic()
