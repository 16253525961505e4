"""The Python client against a live ``arbor serve``: a run started, its events followed and
resumed with ``Last-Event-ID``, an approval decided and the run resumed, a question
answered, listings paged, the tree streamed, and errors raised as typed exceptions carrying
``kind``, ``field`` and ``limit``; the async client through the same flow."""

from __future__ import annotations

import asyncio
import uuid

import pydantic
import pytest

from arbor_client import (
    ArborClient,
    AsyncArborClient,
    Conflict,
    LimitError,
    NotFound,
    Unauthorized,
    ValidationError,
    models,
)
from conftest import TOKEN


@pytest.fixture
def arbor(server: str):
    with ArborClient(server, token=TOKEN, timeout=10) as client:
        yield client


def events_until_suspended(arbor: ArborClient, root: str, **kw) -> list:
    seen = []
    for event in arbor.events(root, **kw):
        seen.append(event)
        if event.event == "status" and event.data["status"] == "suspended":
            return seen
    raise AssertionError(f"the stream ended before the run suspended: {seen}")


def test_a_run_waits_for_approval_is_approved_resumed_and_streamed(
    arbor: ArborClient,
) -> None:
    assert {"approvals", "question", "review"} <= set(arbor.specs())
    run = arbor.start_run("approvals", labels={"suite": "python"})
    assert isinstance(run, models.RunView)
    root = run.root_id

    # The session's events, from the start, until it waits.
    seen = events_until_suspended(arbor, root, since=0)
    kinds = [e.event for e in seen if e.id is not None]
    assert kinds[0] == "run_started", kinds
    ids = [int(e.id) for e in seen if e.id is not None]
    assert ids == sorted(ids) and len(set(ids)) == len(ids), ids

    waiting = arbor.wait_run(root, timeout=20)
    assert waiting.status == "suspended"
    assert waiting.result is not None and waiting.result.status == "suspended"
    pending = arbor.pending(root)
    assert len(pending) == 1, pending
    call = pending[0]
    assert isinstance(call, models.PendingView)
    assert call.question is None
    assert call.path == ["publisher"], call.path

    left = arbor.approve(root, call.id, reason="looks right", by="python-suite")
    assert left.pending == []
    # Decided once: a second decision on the same call is a conflict naming the first.
    with pytest.raises(Conflict) as again:
        arbor.reject(root, call.id)
    assert again.value.kind == "conflict"
    assert "allow_once" in again.value.message

    resumed = arbor.resume(root)
    assert resumed.status == "resuming"
    # Right after a resume, waiting reads the resumed run's end, not the suspension.
    done = arbor.wait_run(root, timeout=20)
    assert done.status == "succeeded", done
    assert done.result is not None and done.result.status == "succeeded", done.result

    # Resuming the stream after the last id seen replays only what came after it.
    last = [e.id for e in seen if e.id is not None][-1]
    after = [e for e in arbor.events(root, last_event_id=last)]
    numbered = [int(e.id) for e in after if e.id is not None]
    assert numbered and numbered[0] == int(last) + 1, (last, numbered)
    assert after[-1].event == "end" and after[-1].data["status"] == "succeeded", after[
        -1
    ]
    assert "run_finished" in [e.event for e in after]
    # The decision is in the transcript of the session whose call it decided, with who.
    publisher = next(s for s in done.tree.sessions if s.name == "publisher")
    decisions = [
        e for e in arbor.iter_transcript(publisher.id) if e.get("kind") == "decision"
    ]
    assert len(decisions) == 1, decisions
    assert "python-suite" in str(decisions[0]), decisions[0]

    # Every entry of the transcript, page by page, matches what the stream carried.
    entries = list(arbor.iter_transcript(root, page_size=3))
    assert [e["seq"] for e in entries] == list(range(1, len(entries) + 1))
    assert len(entries) == max(numbered)


def _wait_for(arbor: ArborClient, root: str, status: str) -> models.RunView:
    """The run once its root reads ``status`` (a resume goes on in the background)."""
    import time

    deadline = time.monotonic() + 20
    while True:
        view = arbor.run(root)
        if view.status == status and view.result is not None:
            return view
        assert time.monotonic() < deadline, view
        time.sleep(0.05)


def test_a_question_is_answered_and_reaches_the_child(arbor: ArborClient) -> None:
    run = arbor.start_run("question")
    root = run.root_id
    arbor.wait_run(root, timeout=20)
    [call] = arbor.pending(root)
    assert call.question is not None
    assert call.question.question == "Which colour for the fence?"
    assert call.question.choices == ["blue", "green"]
    # An answer outside the choices names the field.
    with pytest.raises(ValidationError) as bad:
        arbor.answer(root, call.id, "red")
    assert bad.value.kind == "validation"
    assert bad.value.field == "decisions[0].answer", bad.value
    arbor.answer(root, call.id, "green")
    arbor.resume(root)
    done = _wait_for(arbor, root, "succeeded")
    assert done.result.text == "The fence is painted."
    painter = next(s for s in done.tree.sessions if s.name == "painter")
    results = [
        e["message"]["content"]
        for e in arbor.iter_transcript(painter.id)
        if e.get("kind") == "message" and e["message"].get("role") == "tool"
    ]
    assert results == ["green"], results


def test_listings_page_and_filter(arbor: ArborClient) -> None:
    batch = uuid.uuid4().hex[:8]
    started = [
        arbor.start_run("review", labels={"batch": batch}).root_id for _ in range(5)
    ]
    for root in started:
        arbor.wait_run(root, timeout=20)
    page = arbor.runs(limit=2, label=f"batch:{batch}")
    assert len(page.runs) == 2 and page.next_cursor
    listed = [r.id for r in arbor.iter_runs(page_size=2, label=f"batch:{batch}")]
    assert sorted(listed) == sorted(started), (listed, started)
    assert all(
        r.spec == "review" for r in arbor.iter_runs(page_size=2, label=f"batch:{batch}")
    )
    assert [r.labels for r in page.runs] == [{"batch": batch}] * 2
    # Children page too.
    kids = list(arbor.iter_children(started[0], page_size=1))
    assert kids and all(k.parent_id == started[0] for k in kids)


def test_the_tree_streams_until_it_ends(arbor: ArborClient) -> None:
    run = arbor.start_run("review")
    snapshots = list(arbor.tree_events(run.root_id))
    assert snapshots, "at least one snapshot"
    last = snapshots[-1]
    assert isinstance(last, models.TreeSnapshot)
    assert last.root_id == run.root_id
    assert last.nodes[0].id == run.root_id
    assert all(n.status == "succeeded" for n in last.nodes), [
        n.status for n in last.nodes
    ]
    fingerprints = [s.fingerprint for s in snapshots]
    assert len(set(fingerprints)) == len(fingerprints), fingerprints


def test_errors_are_typed_with_kind_field_and_limit(
    server: str, arbor: ArborClient
) -> None:
    with pytest.raises(NotFound) as unknown:
        arbor.start_run("no-such-spec")
    assert unknown.value.kind == "not_found" and unknown.value.status == 404
    assert unknown.value.field == "spec", unknown.value
    with pytest.raises(NotFound):
        arbor.run(str(uuid.uuid4()))
    with pytest.raises(ValidationError) as big:
        arbor.runs(limit=100_000)
    assert big.value.field == "limit", big.value
    # A misspelt request key is refused before it is sent (by the request model).
    with pytest.raises(pydantic.ValidationError) as typo:
        arbor.start_run("review", tsak="x")
    assert "tsak" in str(typo.value)
    with ArborClient(server, token="wrong") as stranger:
        with pytest.raises(Unauthorized) as denied:
            stranger.specs()
    assert denied.value.status == 401
    # The tenant may hold at most 4 streams: the fifth is refused naming the limit.
    run = arbor.start_run("approvals")
    arbor.wait_run(run.root_id, timeout=20)
    streams = [arbor.events(run.root_id) for _ in range(4)]
    try:
        for s in streams:
            next(s)
        with pytest.raises(LimitError) as full:
            next(arbor.events(run.root_id))
        assert full.value.limit is not None
        assert full.value.limit.name == "max_streams_per_tenant"
        assert full.value.limit.maximum == 4
        assert full.value.status == 429
    finally:
        for s in streams:
            s.close()


def test_the_async_client_runs_the_same_flow(server: str) -> None:
    async def flow() -> None:
        async with AsyncArborClient(server, token=TOKEN, timeout=10) as arbor:
            run = await arbor.start_run("approvals")
            root = run.root_id
            kinds = []
            async for event in arbor.events(root, since=0):
                if event.id is not None:
                    kinds.append(event.event)
                if event.event == "status" and event.data["status"] == "suspended":
                    break
            assert kinds[0] == "run_started", kinds
            await arbor.wait_run(root, timeout=20)
            [call] = await arbor.pending(root)
            await arbor.approve(root, call.id)
            await arbor.resume(root)
            snapshots = [s async for s in arbor.tree_events(root)]
            assert snapshots[-1].nodes[0].status == "succeeded", snapshots[-1].nodes[0]
            listed = [r.id async for r in arbor.iter_runs(page_size=1)]
            assert root in listed
            with pytest.raises(NotFound):
                await arbor.session(str(uuid.uuid4()))

    asyncio.run(flow())


def test_a_broken_stream_resumes_with_the_last_id_and_loses_nothing(
    server: str, arbor: ArborClient
) -> None:
    from cutting_proxy import CuttingProxy

    run = arbor.start_run("approvals")
    root = run.root_id
    arbor.wait_run(root, timeout=20)
    [call] = arbor.pending(root)
    arbor.approve(root, call.id)
    arbor.resume(root)
    _wait_for(arbor, root, "succeeded")
    whole = [e for e in arbor.events(root, since=0) if e.id is not None]

    port = int(server.rsplit(":", 1)[1])
    proxy = CuttingProxy(port, cuts=2, after=900)
    try:
        with ArborClient(f"http://127.0.0.1:{proxy.port}", token=TOKEN) as cut:
            got = list(cut.events(root, since=0))
    finally:
        proxy.close()
    assert proxy.cut == 2, "both cuts happened"
    assert len(proxy.resumed_with) == 2, proxy.resumed_with
    numbered = [e for e in got if e.id is not None]
    assert [e.id for e in numbered] == [
        e.id for e in whole
    ], "no event lost or repeated"
    assert [e.data for e in numbered] == [e.data for e in whole]
    assert got[-1].event == "end"


def test_the_feed_follows_a_runs_changes_and_its_approvals(arbor: ArborClient) -> None:
    run = arbor.start_run("approvals", labels={"feed": "yes"})
    root = run.root_id
    feed = arbor.feed(since=0)
    mine = []
    # Live: what the run does shows in the feed, in order, each entry once.
    for entry in feed:
        if getattr(entry, "root_id", None) != root:
            continue
        mine.append(entry)
        if entry.type == "approval_pending":
            break
    [call] = arbor.pending(root)
    assert mine[-1].approval_id == call.id, (mine[-1], call.id)
    arbor.approve(root, call.id)
    arbor.resume(root)
    for entry in feed:
        if getattr(entry, "root_id", None) != root:
            continue
        mine.append(entry)
        kinds = [e.type for e in mine]
        done = any(e.type == "run" and e.status == "succeeded" for e in mine)
        if done and "approval_decided" in kinds:
            break
    feed.close()
    kinds = [e.type for e in mine]
    assert "approval_decided" in kinds, kinds
    runs = [e for e in mine if e.type == "run"]
    assert all(e.labels == {"feed": "yes"} for e in runs), runs
    seqs = [e.seq for e in mine]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs), seqs


def test_a_host_spawns_waits_and_messages_through_the_client(
    arbor: ArborClient,
) -> None:
    from arbor_client import models as m

    run = arbor.start_run("review")
    root = run.root_id
    arbor.wait_run(root, timeout=20)
    children = [s.child_id for s in arbor.run(root).tree.sessions if s.child_id]
    assert children, "the review spec has children"
    handle = arbor.spawn(
        root, {"child_id": children[0], "input": "Look again", "mode": "async"}
    )
    assert isinstance(handle, m.HandleView), handle
    answer = arbor.delegation(root, handle.delegation_id, wait_ms=15000)
    assert isinstance(answer, m.AnswerView), answer
    receipt = arbor.message(root, {"text": "thanks"})
    assert receipt.status == "delivered", receipt
    with pytest.raises(NotFound):
        arbor.delegation(root, "no-such-delegation")


def test_a_coding_childs_work_is_diffed_merged_once_and_discarded(
    arbor: ArborClient,
) -> None:
    root = arbor.start_run("coding").root_id
    assert arbor.wait_run(root, timeout=20).status == "succeeded"
    child = arbor.children(root).children[0].id
    diff = arbor.diff(child, max_bytes=65536)
    assert isinstance(diff, models.DiffView)
    assert [(f.path, f.added, f.removed) for f in diff.files] == [("greet.sh", 1, 1)]
    assert "+greeting() { echo Hello; }" in diff.patch and diff.next_offset is None
    with pytest.raises(Conflict):
        arbor.merge(child, expect_tip="0" * 40)
    with pytest.raises(ValidationError) as bad:
        arbor.merge(child, strategy="rebase")
    assert bad.value.field == "strategy"
    merged = arbor.merge(child, expect_tip=diff.tip)
    assert merged.merged and not merged.already_merged and merged.strategy == "merge"
    again = arbor.merge(child)
    assert again.already_merged and again.commit == merged.commit
    gone = arbor.discard(child)
    assert gone.discarded and gone.branch == diff.branch
    with pytest.raises(Conflict):
        arbor.diff(child)
