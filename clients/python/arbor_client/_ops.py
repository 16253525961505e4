"""The API's operations as requests and parsers, shared by the sync and async clients: each
builds a :class:`Call` (what to send) whose ``parse`` turns the answer into the generated
model the OpenAPI document names for it."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from pydantic import BaseModel

from . import models as m

#: A session's status once its run has stopped (answered, failed, waiting for a person).
SETTLED = frozenset(
    {"succeeded", "failed", "aborted", "suspended", "denied", "interrupted"}
)


@dataclass(frozen=True)
class Call:
    """One request, and how to read its successful answer."""

    method: str
    path: str
    parse: Callable[[int, Any], Any]
    params: Mapping[str, Any] = field(default_factory=dict)
    json: Any = None
    headers: Mapping[str, str] = field(default_factory=dict)
    #: Seconds, for a request the server may hold (a wait); else the client's own.
    timeout: float | None = None


def _model(cls: type[BaseModel]) -> Callable[[int, Any], Any]:
    return lambda _status, body: cls.model_validate(body)


def _seg(value: str) -> str:
    return quote(str(value), safe="")


def _dump(value: BaseModel | Mapping[str, Any]) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json", exclude_none=True)
    return dict(value)


def _params(**values: Any) -> dict[str, Any]:
    return {k: v for k, v in values.items() if v is not None}


def specs() -> Call:
    return Call("GET", "/v1/specs", lambda _s, b: m.SpecList.model_validate(b).specs)


def start_run(
    spec: str | None,
    task: str | None,
    labels: Mapping[str, str] | None,
    budget: m.BudgetRequest | Mapping[str, Any] | None,
    controls: m.ControlsSchema | Mapping[str, Any] | None,
    idempotency_key: str | None,
    extra: Mapping[str, Any],
) -> Call:
    body: dict[str, Any] = {k: v for k, v in extra.items() if v is not None}
    if spec is not None:
        body["spec"] = spec
    if task is not None:
        body["task"] = task
    if labels is not None:
        body["labels"] = dict(labels)
    if budget is not None:
        body["budget"] = _dump(budget)
    if controls is not None:
        body["controls"] = _dump(controls)
    # The request model checks the body before it is sent: a misspelt key fails here.
    request = m.StartRunRequest.model_validate(body)
    headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
    return Call(
        "POST",
        "/v1/runs",
        _model(m.RunView),
        json=request.model_dump(mode="json", exclude_none=True),
        headers=headers,
    )


def run(run_id: str) -> Call:
    return Call("GET", f"/v1/runs/{_seg(run_id)}", _model(m.RunView))


def runs(**filters: Any) -> Call:
    return Call("GET", "/v1/runs", _model(m.RunList), params=_params(**filters))


def resume(run_id: str) -> Call:
    return Call("POST", f"/v1/runs/{_seg(run_id)}/resume", _model(m.ResumeView))


def session(session_id: str) -> Call:
    return Call("GET", f"/v1/sessions/{_seg(session_id)}", _model(m.SessionView))


def children(session_id: str, **filters: Any) -> Call:
    return Call(
        "GET",
        f"/v1/sessions/{_seg(session_id)}/children",
        _model(m.ChildrenView),
        params=_params(**filters),
    )


def transcript(session_id: str, after: int | None, limit: int | None) -> Call:
    return Call(
        "GET",
        f"/v1/sessions/{_seg(session_id)}/transcript",
        _model(m.TranscriptPage),
        params=_params(after=after, limit=limit),
    )


def approvals(session_id: str, limit: int | None, cursor: str | None) -> Call:
    return Call(
        "GET",
        f"/v1/sessions/{_seg(session_id)}/approvals",
        _model(m.ApprovalsView),
        params=_params(limit=limit, cursor=cursor),
    )


def decide(
    session_id: str,
    decisions: Sequence[m.DecisionInput | Mapping[str, Any]],
    by: str | None,
) -> Call:
    request = m.DecideRequest(
        decisions=[
            d if isinstance(d, m.DecisionInput) else m.DecisionInput.model_validate(d)
            for d in decisions
        ],
        by=by,
    )
    return Call(
        "POST",
        f"/v1/sessions/{_seg(session_id)}/approvals",
        _model(m.SuspensionView),
        json=request.model_dump(mode="json", exclude_none=True),
    )


def cancel(session_id: str) -> Call:
    return Call("POST", f"/v1/sessions/{_seg(session_id)}/cancel", _model(m.CancelView))


def delete(session_id: str, reason: str | None) -> Call:
    return Call(
        "DELETE",
        f"/v1/sessions/{_seg(session_id)}",
        _model(m.DeletedView),
        params=_params(reason=reason),
    )


def diff(session_id: str, offset: int | None, max_bytes: int | None) -> Call:
    return Call(
        "GET",
        f"/v1/sessions/{_seg(session_id)}/diff",
        _model(m.DiffView),
        params=_params(offset=offset, max_bytes=max_bytes),
    )


def merge(session_id: str, strategy: str | None, expect_tip: str | None) -> Call:
    return Call(
        "POST",
        f"/v1/sessions/{_seg(session_id)}/merge",
        _model(m.MergeView),
        json=_params(strategy=strategy, expect_tip=expect_tip),
    )


def discard(session_id: str) -> Call:
    return Call(
        "POST", f"/v1/sessions/{_seg(session_id)}/discard", _model(m.DiscardView)
    )


#: The server's default and longest waits for a delegation's answer, in seconds.
WAIT_DEFAULT_S = 10
WAIT_MAX_S = 25


def _spawned(status: int, body: Any) -> m.HandleView | m.AnswerView | m.DelegationState:
    if status == 200:
        return m.WaitAnswer.model_validate(body).root
    return m.HandleView.model_validate(body)


def spawn(session_id: str, request: m.SpawnRequest | Mapping[str, Any]) -> Call:
    body = (
        request
        if isinstance(request, m.SpawnRequest)
        else m.SpawnRequest.model_validate(request)
    )
    return Call(
        "POST",
        f"/v1/sessions/{_seg(session_id)}/children",
        _spawned,
        json=body.model_dump(mode="json", exclude_none=True),
        # A sync spawn answers when its child does (at most the server's longest wait).
        timeout=WAIT_MAX_S + 10,
    )


def _waited(status: int, body: Any) -> m.AnswerView | m.DelegationState:
    if status == 202:
        return m.DelegationState.model_validate(body)
    return m.WaitAnswer.model_validate(body).root


def delegation(session_id: str, delegation_id: str, wait_ms: int | None) -> Call:
    waits = WAIT_DEFAULT_S if wait_ms is None else wait_ms / 1000
    return Call(
        "GET",
        f"/v1/sessions/{_seg(session_id)}/delegations/{_seg(delegation_id)}",
        _waited,
        params=_params(wait_ms=wait_ms),
        timeout=min(waits, WAIT_MAX_S) + 10,
    )


def end_delegation(session_id: str, delegation_id: str, how: str) -> Call:
    return Call(
        "POST",
        f"/v1/sessions/{_seg(session_id)}/delegations/{_seg(delegation_id)}/{how}",
        _model(m.DelegationState),
    )


def message(session_id: str, request: m.MessageRequest | Mapping[str, Any]) -> Call:
    body = (
        request
        if isinstance(request, m.MessageRequest)
        else m.MessageRequest.model_validate(request)
    )
    return Call(
        "POST",
        f"/v1/sessions/{_seg(session_id)}/messages",
        _model(m.ReceiptView),
        json=body.model_dump(mode="json", exclude_none=True),
    )


def verdict(
    pending_id: str, allow_or_reject: str, for_run: bool, reason: str | None
) -> dict[str, Any]:
    """One decision: `allow`/`reject`, once or for the run."""
    scope = "_for_run" if for_run else "_once"
    return _params(id=pending_id, verdict=allow_or_reject + scope, reason=reason)
