#!/usr/bin/env python3
"""A remote A2A agent written with the official Python SDK (a2a-sdk 1.3.0), for arbor's A2A
client tests (a2a_client_test.py). It answers by the first word of its input:

- `echo TEXT`: a WORKING status, an artifact `echo: TEXT`, COMPLETED with `metadata.usage`
  (20 input, 10 output tokens);
- `ask`: WORKING, then INPUT_REQUIRED "Which city?"; the reply CITY gives an artifact
  `booked: CITY` and COMPLETED;
- `slow`: WORKING, then waits 60 s (a cancel ends it: CANCELED);
- `vanish`: WORKING, then the whole process exits (a server that disappears mid-task).

Every request must carry `Authorization: Bearer <token>` (401 otherwise). Each executor
call and cancel is appended, one JSON line, to the log file.

Usage: demo_a2a_server.py PORT TOKEN LOG
"""

import asyncio
import json
import os
import sys

import uvicorn
from starlette.applications import Starlette
from starlette.middleware.base import BaseHTTPMiddleware
from starlette.responses import JSONResponse

from a2a.helpers import new_text_part
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    Part,
    Task,
    TaskState,
    TaskStatus,
)

PORT, TOKEN, LOG = int(sys.argv[1]), sys.argv[2], sys.argv[3]
BASE = f"http://127.0.0.1:{PORT}"


def log(**entry):
    with open(LOG, "a") as f:
        f.write(json.dumps(entry) + "\n")


class Demo(AgentExecutor):
    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        tid, cid, text = context.task_id, context.context_id, context.get_user_input()
        log(event="execute", task=tid, context=cid, text=text)
        if context.current_task is None:
            await event_queue.enqueue_event(
                Task(id=tid, context_id=cid,
                     status=TaskStatus(state=TaskState.TASK_STATE_SUBMITTED),
                     history=[context.message]))
        up = TaskUpdater(event_queue, tid, cid)
        await up.start_work(up.new_agent_message([new_text_part("working on it")]))
        word = text.split(" ", 1)[0]
        asked = (context.current_task is not None
                 and context.current_task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED)
        if asked:
            await up.add_artifact([Part(text=f"booked: {text}")], artifact_id="out", name="answer")
            await up.complete()
        elif word == "echo":
            await up.add_artifact([Part(text=f"echo: {text[5:]}")], artifact_id="out", name="answer")
            await up.update_status(TaskState.TASK_STATE_COMPLETED,
                                   metadata={"usage": {"inputTokens": 20, "outputTokens": 10}})
        elif word == "ask":
            await up.requires_input(up.new_agent_message([new_text_part("Which city?")]))
        elif word == "slow":
            await asyncio.sleep(60)
        elif word == "vanish":
            await asyncio.sleep(0.3)
            os._exit(3)
        else:
            await up.failed(up.new_agent_message([new_text_part(f"unknown request {word!r}")]))

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        log(event="cancel", task=context.task_id)
        await TaskUpdater(event_queue, context.task_id, context.context_id).cancel()


card = AgentCard(
    name="Demo Travel Agent",
    description="Echoes, asks, waits, or vanishes, as told.",
    version="1.0.0",
    supported_interfaces=[
        AgentInterface(url=f"{BASE}/a2a", protocol_binding="JSONRPC", protocol_version="1.0")],
    capabilities=AgentCapabilities(streaming=True),
    default_input_modes=["text/plain"],
    default_output_modes=["text/plain"],
    skills=[AgentSkill(id="demo", name="Demo", description="As told", tags=["demo"])],
)


class Bearer(BaseHTTPMiddleware):
    async def dispatch(self, request, call_next):
        if request.headers.get("authorization") != f"Bearer {TOKEN}":
            log(event="refused", path=request.url.path)
            return JSONResponse({"error": "unauthorized"}, status_code=401)
        return await call_next(request)


handler = DefaultRequestHandler(agent_executor=Demo(), task_store=InMemoryTaskStore(),
                                agent_card=card)
app = Starlette(routes=[*create_agent_card_routes(card),
                        *create_jsonrpc_routes(handler, rpc_url="/a2a")])
app.add_middleware(Bearer)

if __name__ == "__main__":
    uvicorn.run(app, host="127.0.0.1", port=PORT, log_level="warning")
