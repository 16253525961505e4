"""The root's prompt, in tokens, as a llama.cpp server counts it: runs `arbor run SPEC` with
its root on an OpenAI-compatible capture server (which records the first Chat Completions
body and refuses it), then has a running llama-server render that body with its chat
template (/apply-template) and tokenize it (/tokenize).

    python3 tests/real_model/prompt_tokens.py --arbor target/debug/arbor \
        --spec examples/review.toml --llama http://127.0.0.1:18080
"""

import argparse
import http.server
import json
import os
import subprocess
import tempfile
import threading
import urllib.request


def capture_server():
    bodies = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):
            body = json.dumps({"id": "m", "object": "model"}).encode()
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self):
            n = int(self.headers.get("content-length", "0"))
            bodies.append(json.loads(self.rfile.read(n)))
            body = b'{"error":{"message":"captured","type":"invalid_request_error"}}'
            self.send_response(400)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, bodies


def post(url, body):
    req = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"content-type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.loads(r.read())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--arbor", required=True)
    ap.add_argument("--spec", required=True)
    ap.add_argument("--llama", required=True)
    args = ap.parse_args()
    server, bodies = capture_server()
    base = f"http://127.0.0.1:{server.server_address[1]}/v1"
    env = dict(os.environ, OPENAI_BASE_URL=base, OPENAI_API_KEY="capture-key-1234567890")
    with tempfile.TemporaryDirectory() as d:
        subprocess.run(
            [os.path.abspath(args.arbor), "run", os.path.abspath(args.spec), "--provider",
             "openai", "--model", "m", "--memory", "-q"],
            cwd=d, env=env, capture_output=True, timeout=120,
        )
    server.shutdown()
    if not bodies:
        raise SystemExit("the root made no Chat Completions call")
    body = bodies[0]
    prompt = post(args.llama + "/apply-template", body)["prompt"]
    tokens = post(args.llama + "/tokenize", {"content": prompt, "add_special": False})["tokens"]
    tools = [t["function"]["name"] for t in body.get("tools", [])]
    print(json.dumps({"spec": args.spec, "prompt_tokens": len(tokens),
                      "body_bytes": len(json.dumps(body)), "tools": tools}))


if __name__ == "__main__":
    main()
