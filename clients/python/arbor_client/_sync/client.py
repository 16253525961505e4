"""The client of ``arbor serve``, over httpx.

This file is the asynchronous client's source; the synchronous client (``_sync/client.py``)
is generated from it by ``unasync`` (``bash clients/generate.sh``): edit this one only.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
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


class ArborClient:
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
        http: httpx.Client | None = None,
    ) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = http or httpx.Client(
            base_url=base_url, headers=headers, timeout=timeout
        )

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> ArborClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _send(self, call: ops.Call) -> Any:
        extra = {"timeout": call.timeout} if call.timeout is not None else {}
        try:
            response = self._http.request(
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

    def specs(self) -> list[str]:
        """The names of the specs the server can start."""
        return self._send(ops.specs())

    def start_run(
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
        return self._send(
            ops.start_run(spec, task, labels, budget, controls, idempotency_key, extra)
        )

    def run(self, run_id: str) -> m.RunView:
        """A run: its root's status, its tree, its result once it has one."""
        return self._send(ops.run(run_id))

    def runs(
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
        return self._send(
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

    def iter_runs(
        self, *, page_size: int | None = None, **filters: Any
    ) -> Iterator[m.RunSummary]:
        """Every run the filters of :meth:`runs` select, page after page."""
        cursor: str | None = None
        while True:
            page = self.runs(limit=page_size, cursor=cursor, **filters)
            for r in page.runs:
                yield r
            if not page.next_cursor:
                return
            cursor = page.next_cursor

    def wait_run(
        self, run_id: str, *, timeout: float = 60.0, poll: float = 0.05
    ) -> m.RunView:
        """Waits until the run stops (it answered, failed, or waits for a decision) and
        returns it; ``TimeoutError`` past ``timeout`` seconds."""
        deadline = monotonic() + timeout
        while True:
            view = self.run(run_id)
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
            time.sleep(poll)

    def resume(self, run_id: str) -> m.ResumeView:
        """Resumes a run whose waiting calls are all decided (or one a crash interrupted)."""
        return self._send(ops.resume(run_id))

    # Sessions.

    def session(self, session_id: str) -> m.SessionView:
        return self._send(ops.session(session_id))

    def children(
        self,
        session_id: str,
        *,
        limit: int | None = None,
        cursor: str | None = None,
        status: str | None = None,
    ) -> m.ChildrenView:
        return self._send(
            ops.children(session_id, limit=limit, cursor=cursor, status=status)
        )

    def iter_children(
        self,
        session_id: str,
        *,
        page_size: int | None = None,
        status: str | None = None,
    ) -> Iterator[m.SessionView]:
        cursor: str | None = None
        while True:
            page = self.children(
                session_id, limit=page_size, cursor=cursor, status=status
            )
            for c in page.children:
                yield c
            if not page.next_cursor:
                return
            cursor = page.next_cursor

    def transcript(
        self, session_id: str, *, after: int | None = None, limit: int | None = None
    ) -> m.TranscriptPage:
        return self._send(ops.transcript(session_id, after, limit))

    def iter_transcript(
        self, session_id: str, *, after: int | None = None, page_size: int | None = None
    ) -> Iterator[dict[str, Any]]:
        """Every transcript entry after ``after``, oldest first."""
        while True:
            page = self.transcript(session_id, after=after, limit=page_size)
            for e in page.entries:
                yield e
            if page.next_after is None:
                return
            after = page.next_after

    def cancel(self, session_id: str) -> m.CancelView:
        return self._send(ops.cancel(session_id))

    def delete(self, session_id: str, *, reason: str | None = None) -> m.DeletedView:
        return self._send(ops.delete(session_id, reason))

    # Coding children's work: the caller is the approver.

    def diff(
        self,
        session_id: str,
        *,
        offset: int | None = None,
        max_bytes: int | None = None,
    ) -> m.DiffView:
        """What a coding child's branch changes against the main checkout now."""
        return self._send(ops.diff(session_id, offset, max_bytes))

    def merge(
        self,
        session_id: str,
        *,
        strategy: str | None = None,
        expect_tip: str | None = None,
    ) -> m.MergeView:
        """Merges a finished coding child's branch (only at ``expect_tip``, when given)."""
        return self._send(ops.merge(session_id, strategy, expect_tip))

    def discard(self, session_id: str) -> m.DiscardView:
        """Throws a finished coding child's worktree and branch away."""
        return self._send(ops.discard(session_id))

    # Approvals and questions.

    def approvals(
        self, session_id: str, *, limit: int | None = None, cursor: str | None = None
    ) -> m.ApprovalsView:
        return self._send(ops.approvals(session_id, limit, cursor))

    def pending(self, session_id: str) -> list[m.PendingView]:
        """Every call waiting for a decision at the session, over every page."""
        out: list[m.PendingView] = []
        cursor: str | None = None
        while True:
            page = self.approvals(session_id, cursor=cursor)
            for s in page.suspensions:
                out.extend(s.pending)
            if not page.next_cursor:
                return out
            cursor = page.next_cursor

    def decide(
        self,
        session_id: str,
        decisions: Sequence[m.DecisionInput | Mapping[str, Any]],
        *,
        by: str | None = None,
    ) -> m.SuspensionView:
        """Records decisions (all on calls of one suspended run); returns what still waits."""
        return self._send(ops.decide(session_id, decisions, by))

    def approve(
        self,
        session_id: str,
        pending_id: str,
        *,
        reason: str | None = None,
        for_run: bool = False,
        by: str | None = None,
    ) -> m.SuspensionView:
        return self.decide(
            session_id, [ops.verdict(pending_id, "allow", for_run, reason)], by=by
        )

    def reject(
        self,
        session_id: str,
        pending_id: str,
        *,
        reason: str | None = None,
        for_run: bool = False,
        by: str | None = None,
    ) -> m.SuspensionView:
        return self.decide(
            session_id, [ops.verdict(pending_id, "reject", for_run, reason)], by=by
        )

    def answer(
        self, session_id: str, pending_id: str, text: str, *, by: str | None = None
    ) -> m.SuspensionView:
        """Answers a question an agent asked (``ask_human``)."""
        return self.decide(session_id, [{"id": pending_id, "answer": text}], by=by)

    # A host acting as a parent.

    def spawn(
        self, session_id: str, request: m.SpawnRequest | Mapping[str, Any]
    ) -> m.HandleView | m.AnswerView | m.DelegationState:
        return self._send(ops.spawn(session_id, request))

    def delegation(
        self, session_id: str, delegation_id: str, *, wait_ms: int | None = None
    ) -> m.AnswerView | m.DelegationState:
        return self._send(ops.delegation(session_id, delegation_id, wait_ms))

    def cancel_delegation(
        self, session_id: str, delegation_id: str
    ) -> m.DelegationState:
        return self._send(ops.end_delegation(session_id, delegation_id, "cancel"))

    def stop_delegation(self, session_id: str, delegation_id: str) -> m.DelegationState:
        return self._send(ops.end_delegation(session_id, delegation_id, "stop"))

    def message(
        self, session_id: str, request: m.MessageRequest | Mapping[str, Any]
    ) -> m.ReceiptView:
        return self._send(ops.message(session_id, request))

    # Event streams.

    def events(
        self,
        session_id: str,
        *,
        since: int | None = None,
        last_event_id: str | None = None,
    ) -> Iterator[Event]:
        """A session's transcript entries (``event`` = the entry's type, ``id`` = its
        sequence number) and status changes (``status``), until ``end``, which is the last
        event yielded. A broken connection is resumed with the last id seen."""
        params = ops._params(since=since)
        for event in self._follow(
            f"/v1/sessions/{ops._seg(session_id)}/events", params, last_event_id
        ):
            yield event

    def tree_events(
        self, run_id: str, *, last_event_id: str | None = None
    ) -> Iterator[m.TreeSnapshot]:
        """Whole-tree snapshots of a run, at once and on every change, until the tree ends."""
        for event in self._follow(
            f"/v1/runs/{ops._seg(run_id)}/events", {}, last_event_id
        ):
            if event.event == "tree":
                yield m.TreeSnapshot.model_validate(event.data)

    def feed(
        self, *, since: int | None = None, last_event_id: str | None = None
    ) -> Iterator[m.FeedEntry1 | m.FeedEntry2 | m.FeedEntry3]:
        """The tenant's event feed (runs changing status, approvals waiting and decided),
        live; pass ``since`` (0: from the start) to replay what was logged before. An event of
        a kind this client does not know is skipped."""
        params = ops._params(since=since)
        for event in self._follow("/v1/events", params, last_event_id):
            if event.id is None:
                continue
            try:
                yield m.FeedEntry.model_validate(event.data).root
            except pydantic.ValidationError:
                continue

    def _follow(
        self, path: str, params: Mapping[str, Any], last_event_id: str | None
    ) -> Iterator[Event]:
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
                time.sleep(min(0.1 * 2**tries, 2.0))
            headers = {"Last-Event-ID": last_event_id} if last_event_id else {}
            try:
                with self._http.stream(
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
                        response.read()
                        why = f"HTTP {response.status_code}"
                    elif not response.is_success:
                        response.read()
                        raise_for(response)
                    else:
                        parser = Parser()
                        for line in response.iter_lines():
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
