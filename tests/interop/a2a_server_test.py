#!/usr/bin/env python3
"""arbor serve as an A2A server, driven by the official Python SDK's client (a2a-sdk 1.3.0,
`create_client`) with a tenant's bearer token, as a remote organisation would drive it.

Checked:
- the card of each spec resolves (JSON-RPC, streaming, bearer), and the client speaks 1.0;
- a streamed task of the approvals spec: the task, then TASK_STATE_INPUT_REQUIRED naming
  the call that waits; the reply "approve" resumes the tree: the answer as an artifact,
  then TASK_STATE_COMPLETED with the tree's tokens in metadata.usage; the stream closes;
- the approved call ran exactly once (the child's transcript), and /v1 shows the same run;
- a question of the tree (question spec) is answered by a reply whose text is the answer;
  a second reply to the ended task is refused (UnsupportedOperationError);
- a blocking SendMessage (streaming off) answers once the task asks, wrapped as a task;
- a slow task is cancelled (CancelTask: TASK_STATE_CANCELED), so is one that waits for
  input (its calls rejected, none run); cancelling again is TaskNotCancelableError;
- another tenant's task and an unknown id are both TaskNotFoundError; a wrong token is a
  401 on the card;
- the same flow through the HTTP+JSON binding (the client choosing it from the card).

Usage: a2a_server_test.py --arbor target/debug/arbor
"""

import argparse
import asyncio
import json
import os
import re
import subprocess
import sys
import tempfile
import urllib.request
import uuid

import httpx
from google.protobuf.json_format import MessageToDict

from a2a.client import ClientConfig, create_client
from a2a.helpers import get_artifact_text, get_message_text
from a2a.types import (
    CancelTaskRequest,
    GetTaskRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    TaskNotCancelableError,
    TaskNotFoundError,
    TaskState,
    UnsupportedOperationError,
)

from checks import Checks

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLES = os.path.join(HERE, "..", "..", "examples")
ACME, OTHER = "tok-acme-a2a-0123456789", "tok-other-a2a-0123456789"

SLOW_SPEC = """
task = "Take your time."
root = "root"

[agents.root]
[[agents.root.turns]]
delay_ms = 60000
text = "finally"
"""

check = Checks("a2a server")


def start_serve(arbor, tmp):
    specs = os.path.join(tmp, "specs")
    os.makedirs(specs)
    for name in ("approvals", "question"):
        with open(os.path.join(EXAMPLES, f"{name}.toml")) as src, \
                open(os.path.join(specs, f"{name}.toml"), "w") as dst:
            dst.write(src.read())
    with open(os.path.join(specs, "slow.toml"), "w") as f:
        f.write(SLOW_SPEC)
    store = os.path.join(tmp, "serve.db")
    env = dict(os.environ, ARBOR_TOKENS=f"acme={ACME},other={OTHER}")
    env.pop("ARBOR_LOG", None)
    proc = subprocess.Popen([arbor, "serve", "--store", store, "--specs", specs,
                             "--listen", "127.0.0.1:0"],
                            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, env=env)
    line = proc.stderr.readline()
    m = re.search(r"http://(127\.0\.0\.1:\d+)", line)
    if not m:
        proc.kill()
        raise RuntimeError(f"arbor serve did not start: {line}")
    return proc, f"http://{m.group(1)}", store


def msg(text, task_id="", context_id="", data=None):
    parts = [Part(text=text)] if text else []
    if data is not None:
        from google.protobuf import struct_pb2
        value = struct_pb2.Value()
        value.struct_value.update(data)
        parts.append(Part(data=value))
    return SendMessageRequest(message=Message(
        message_id=str(uuid.uuid4()), role=Role.ROLE_USER, parts=parts,
        task_id=task_id, context_id=context_id))


async def consume(client, req):
    """Every item of one streamed send: (kind, state, text) each, and the task's ids."""
    items, tid, cid = [], "", ""
    async for ev in client.send_message(req):
        kind = ev.WhichOneof("payload")
        if kind == "task":
            tid, cid = ev.task.id, ev.task.context_id
            items.append(("task", ev.task.status.state, get_message_text(ev.task.status.message)))
        elif kind == "status_update":
            su = ev.status_update
            tid, cid = su.task_id, su.context_id
            items.append(("status", su.status.state, get_message_text(su.status.message),
                          MessageToDict(su.metadata)))
        elif kind == "artifact_update":
            items.append(("artifact", None, get_artifact_text(ev.artifact_update.artifact)))
        else:
            items.append((kind, None, ""))
    return items, tid, cid


def states(items):
    return [i[1] for i in items if i[1] is not None]


def get_json(url, token):
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())


def transcript(base, token, session):
    return get_json(f"{base}/v1/sessions/{session}/transcript?limit=500", token)["entries"]


async def approvals_checks(base, acme):
    client = await create_client(f"{base}/a2a/approvals",
                                 client_config=ClientConfig(streaming=True, httpx_client=acme))
    async with client:
        items, tid, cid = await consume(client, msg("Publish the v1.2 notes."))
        check("approvals: the stream starts with the task", items and items[0][0] == "task", items[:1])
        check("approvals: it ends INPUT_REQUIRED, naming the call",
              states(items)[-1] == TaskState.TASK_STATE_INPUT_REQUIRED and "echo" in items[-1][2],
              items[-1:])
        items, tid2, _ = await consume(client, msg("approve", tid, cid))
        check("approvals: the reply goes on with the same task", tid2 == tid, (tid, tid2))
        arts = [i[2] for i in items if i[0] == "artifact"]
        check("approvals: the answer comes as an artifact",
              arts == ["The release notes are out."], items)
        last = items[-1]
        check("approvals: then TASK_STATE_COMPLETED with the tree's tokens",
              last[1] == TaskState.TASK_STATE_COMPLETED
              and last[3].get("usage", {}).get("totalTokens", 0) > 0, last)
        task = await client.get_task(GetTaskRequest(id=tid))
        check("approvals: GetTask reads it completed with its answer",
              task.status.state == TaskState.TASK_STATE_COMPLETED
              and get_artifact_text(task.artifacts[0]) == "The release notes are out.", task)
    run = get_json(f"{base}/v1/runs/{tid}", ACME)
    child = next(s for s in run["tree"]["sessions"] if s["name"] == "publisher")
    ran = [e for e in transcript(base, ACME, child["id"])
           if e.get("kind") == "message" and e["message"].get("role") == "tool"
           and e["message"].get("name") == "echo"]
    check("approvals: the approved call ran exactly once, and /v1 shows the run",
          run["status"] == "succeeded" and len(ran) == 1 and not ran[0]["message"].get("is_error"),
          (run["status"], ran))
    return tid


async def question_checks(base, acme):
    client = await create_client(f"{base}/a2a/question",
                                 client_config=ClientConfig(streaming=True, httpx_client=acme))
    async with client:
        items, tid, cid = await consume(client, msg("Paint the fence."))
        check("question: the tree's question is INPUT_REQUIRED with its choices",
              states(items)[-1] == TaskState.TASK_STATE_INPUT_REQUIRED
              and "Which colour for the fence?" in items[-1][2] and "blue | green" in items[-1][2],
              items[-1:])
        items, _, _ = await consume(client, msg("green", tid, cid))
        check("question: the answer completes the task",
              states(items)[-1] == TaskState.TASK_STATE_COMPLETED, items)
        run = get_json(f"{base}/v1/runs/{tid}", ACME)
        painter = next(s for s in run["tree"]["sessions"] if s["name"] == "painter")
        answers = [e["message"]["content"] for e in transcript(base, ACME, painter["id"])
                   if e.get("kind") == "message" and e["message"].get("name") == "ask_human"]
        check("question: the child read the answer", answers == ["green"], answers)
        try:
            await consume(client, msg("blue", tid, cid))
            check("question: a reply to an ended task is refused", False, "accepted")
        except UnsupportedOperationError as e:
            check("question: a reply to an ended task is refused",
                  "terminal state" in str(e), e)


async def blocking_checks(base, acme):
    client = await create_client(f"{base}/a2a/approvals",
                                 client_config=ClientConfig(streaming=False, httpx_client=acme))
    async with client:
        out = [ev async for ev in client.send_message(msg("Publish, blocking."))]
        ok = len(out) == 1 and out[0].WhichOneof("payload") == "task"
        task = out[0].task if ok else None
        check("blocking: SendMessage answers once the task asks, as a task",
              ok and task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED, out)
        if task is not None:
            cancelled = await client.cancel_task(CancelTaskRequest(id=task.id))
            check("blocking: a task waiting for input is cancelled",
                  cancelled.status.state == TaskState.TASK_STATE_CANCELED, cancelled.status)
            run = get_json(f"{base}/v1/runs/{task.id}", ACME)
            child = next(s for s in run["tree"]["sessions"] if s["name"] == "publisher")
            ran = [e for e in transcript(base, ACME, child["id"])
                   if e.get("kind") == "message" and e["message"].get("role") == "tool"
                   and not e["message"].get("is_error")]
            check("blocking: none of its calls ran", ran == [], ran)


async def cancel_checks(base, acme, other):
    client = await create_client(f"{base}/a2a/slow",
                                 client_config=ClientConfig(streaming=True, httpx_client=acme))
    async with client:
        stream = client.send_message(msg("Go slowly."))
        first = await stream.__anext__()
        tid = first.task.id
        check("cancel: a slow task is WORKING", first.task.status.state in
              (TaskState.TASK_STATE_WORKING, TaskState.TASK_STATE_SUBMITTED), first.task.status)
        cancelled = await client.cancel_task(CancelTaskRequest(id=tid))
        check("cancel: CancelTask answers TASK_STATE_CANCELED",
              cancelled.status.state == TaskState.TASK_STATE_CANCELED, cancelled.status)
        rest = [ev async for ev in stream]
        last = rest[-1].status_update.status.state if rest else None
        check("cancel: the open stream ends with CANCELED", last == TaskState.TASK_STATE_CANCELED,
              rest)
        try:
            await client.cancel_task(CancelTaskRequest(id=tid))
            check("cancel: again is TaskNotCancelableError", False, "accepted")
        except TaskNotCancelableError:
            check("cancel: again is TaskNotCancelableError", True)
    # Another tenant's task is unknown to it, exactly as an unknown id.
    foreign = await create_client(f"{base}/a2a/slow",
                                  client_config=ClientConfig(streaming=True, httpx_client=other))
    async with foreign:
        for label, task_id in (("another tenant's task", tid), ("an unknown id", str(uuid.uuid4()))):
            try:
                await foreign.get_task(GetTaskRequest(id=task_id))
                check(f"tenancy: {label} is TaskNotFoundError", False, "found")
            except TaskNotFoundError as e:
                check(f"tenancy: {label} is TaskNotFoundError", "Task not found" in str(e), e)


async def rest_checks(base, acme):
    """The same through the HTTP+JSON binding (the client picks it from the card)."""
    config = ClientConfig(streaming=True, httpx_client=acme,
                          supported_protocol_bindings=["HTTP+JSON"])
    client = await create_client(f"{base}/a2a/approvals", client_config=config)
    async with client:
        items, tid, cid = await consume(client, msg("Publish over REST."))
        check("rest: a streamed task asks (INPUT_REQUIRED)",
              items and items[0][0] == "task"
              and states(items)[-1] == TaskState.TASK_STATE_INPUT_REQUIRED, items[-1:])
        items, _, _ = await consume(client, msg("approve", tid, cid))
        check("rest: the reply completes it with its answer",
              states(items)[-1] == TaskState.TASK_STATE_COMPLETED
              and [i[2] for i in items if i[0] == "artifact"] == ["The release notes are out."],
              items)
        task = await client.get_task(GetTaskRequest(id=tid))
        check("rest: GetTask reads it", task.status.state == TaskState.TASK_STATE_COMPLETED,
              task.status)
        try:
            await client.cancel_task(CancelTaskRequest(id=tid))
            check("rest: cancelling an ended task is TaskNotCancelableError", False, "accepted")
        except TaskNotCancelableError:
            check("rest: cancelling an ended task is TaskNotCancelableError", True)
        try:
            await client.get_task(GetTaskRequest(id=str(uuid.uuid4())))
            check("rest: an unknown id is TaskNotFoundError", False, "found")
        except TaskNotFoundError:
            check("rest: an unknown id is TaskNotFoundError", True)


async def main_async(arbor):
    tmp = tempfile.mkdtemp(prefix="a2a-server-")
    proc, base, _ = start_serve(arbor, tmp)
    try:
        card = get_json(f"{base}/a2a/approvals/.well-known/agent-card.json", ACME)
        i = card["supportedInterfaces"][0]
        check("card: JSON-RPC 1.0 at /a2a/approvals, streaming, bearer",
              i["protocolBinding"] == "JSONRPC" and i["protocolVersion"] == "1.0"
              and i["url"] == f"{base}/a2a/approvals" and card["capabilities"]["streaming"]
              and "bearer" in card.get("securitySchemes", {}), card)
        try:
            get_json(f"{base}/a2a/approvals/.well-known/agent-card.json", "wrong")
            check("card: a wrong token is 401", False, "served")
        except urllib.error.HTTPError as e:
            check("card: a wrong token is 401", e.code == 401, e.code)
        acme = httpx.AsyncClient(headers={"Authorization": f"Bearer {ACME}"}, timeout=60)
        other = httpx.AsyncClient(headers={"Authorization": f"Bearer {OTHER}"}, timeout=60)
        await approvals_checks(base, acme)
        await question_checks(base, acme)
        await blocking_checks(base, acme)
        await cancel_checks(base, acme, other)
        await rest_checks(base, acme)
        await acme.aclose()
        await other.aclose()
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
    return check.summary()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--arbor", required=True)
    args = ap.parse_args()
    return asyncio.run(main_async(os.path.abspath(args.arbor)))


if __name__ == "__main__":
    sys.exit(main())
