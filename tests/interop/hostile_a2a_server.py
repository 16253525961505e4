#!/usr/bin/env python3
"""A hostile A2A agent for arbor's A2A client tests (a2a_client_test.py): a valid card, then
answers that break the caps, by the first word of the message:

- `flood`: an SSE stream of artifact updates without end (each 64 KiB), fast;
- `drip`: an SSE stream that sends a task, then nothing but a comment every 0.2 s, forever;
- `html`: an HTML page with status 200 instead of an event stream;
- `huge`: a 20 MiB agent card is served at /huge/.well-known/agent-card.json.

Plain Starlette, no SDK: the point is what the SDK would never send.

Usage: hostile_a2a_server.py PORT
"""

import asyncio
import json
import sys

import uvicorn
from starlette.applications import Starlette
from starlette.responses import HTMLResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import Route

PORT = int(sys.argv[1])
BASE = f"http://127.0.0.1:{PORT}"


def card(request):
    return JSONResponse({
        "name": "Hostile", "description": "breaks caps", "version": "1",
        "supportedInterfaces": [{"url": f"{BASE}/a2a", "protocolBinding": "JSONRPC",
                                 "protocolVersion": "1.0"}],
        "capabilities": {"streaming": True},
        "defaultInputModes": ["text/plain"], "defaultOutputModes": ["text/plain"],
        "skills": [{"id": "x", "name": "x", "description": "x", "tags": []}],
    })


def huge_card(request):
    return Response(b'{"name": "' + b"x" * (20 * 1024 * 1024) + b'"}', media_type="application/json")


def item(rid, result):
    return f"data: {json.dumps({'jsonrpc': '2.0', 'id': rid, 'result': result})}\n\n"


async def rpc(request):
    body = await request.json()
    rid, method = body.get("id"), body.get("method")
    if method != "SendStreamingMessage":
        return JSONResponse({"jsonrpc": "2.0", "id": rid, "result": {
            "id": body.get("params", {}).get("id", ""), "contextId": "c",
            "status": {"state": "TASK_STATE_CANCELED"}}})
    text = body["params"]["message"]["parts"][0].get("text", "")
    word = text.split(" ", 1)[0]
    task = {"task": {"id": f"{word}-task", "contextId": "c", "status": {"state": "TASK_STATE_WORKING"}}}
    if word == "html":
        return HTMLResponse("<html><body>not an event stream</body></html>")

    async def flood():
        yield item(rid, task)
        chunk = "x" * 65536
        while True:
            yield item(rid, {"artifactUpdate": {"taskId": "flood-task", "contextId": "c", "append": True,
                                                "artifact": {"artifactId": "a", "parts": [{"text": chunk}]}}})
            await asyncio.sleep(0)

    async def drip():
        yield item(rid, task)
        while True:
            await asyncio.sleep(0.2)
            yield ": still here\n\n"

    return StreamingResponse(flood() if word == "flood" else drip(), media_type="text/event-stream")


app = Starlette(routes=[
    Route("/.well-known/agent-card.json", card),
    Route("/huge/.well-known/agent-card.json", huge_card),
    Route("/a2a", rpc, methods=["POST"]),
])

if __name__ == "__main__":
    uvicorn.run(app, host="127.0.0.1", port=PORT, log_level="warning")
