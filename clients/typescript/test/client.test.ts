// The TypeScript client against a live `arbor serve`: a run started, its events followed
// and resumed with Last-Event-ID, an approval decided and the run resumed, a question
// answered, listings paged, the tree streamed, errors thrown as ArborError with kind, field
// and limit. ARBOR names the binary (default: the workspace's target/debug/arbor).

import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { spawn, execFileSync, type ChildProcess } from "node:child_process";
import { copyFileSync, mkdirSync, mkdtempSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

import { ArborClient, ArborError, type ServerEvent } from "../src/index.js";

const repo = resolve(dirname(fileURLToPath(import.meta.url)), "../../../..");
const arborBin = process.env.ARBOR ?? join(repo, "target", "debug", "arbor");
const TOKEN = "ts-client-test-token";

/** A lead whose one coding child commits a change to greet.sh. */
const CODING = `task = "t"
root = "lead"
[workspace]
repository = "REPO"
worktrees = "WORKTREES"
id = "client"
[agents.lead]
children = ["edit"]
[[agents.lead.turns]]
tool_calls = [{ name = "spawn_agent", arguments = { child_id = "edit", name = "edit", input = "go" } }]
[[agents.lead.turns]]
text = "done"
[agents.edit]
workspace = true
tools = ["edit_file", "run_command"]
[[agents.edit.turns]]
tool_calls = [{ name = "edit_file", arguments = { path = "greet.sh", old = "hello", new = "Hello" } }]
[[agents.edit.turns]]
tool_calls = [{ name = "run_command", arguments = { argv = ["git", "-c", "user.name=e", "-c", "user.email=e@example.invalid", "commit", "-q", "-am", "Capitalise"] } }]
[[agents.edit.turns]]
text = "committed"
`;

let server: ChildProcess;
let base = "";

async function freePort(): Promise<number> {
  return new Promise((done, fail) => {
    const s = createServer();
    s.listen(0, "127.0.0.1", () => {
      const address = s.address();
      s.close(() => (typeof address === "object" && address ? done(address.port) : fail(new Error("no port"))));
    });
  });
}

before(async () => {
  const work = mkdtempSync(join(tmpdir(), "arbor-ts-"));
  const specs = join(work, "specs");
  mkdirSync(specs);
  for (const name of ["approvals", "question", "review"]) {
    copyFileSync(join(repo, "examples", `${name}.toml`), join(specs, `${name}.toml`));
  }
  // A coding child's repository (its merge, diff and discard).
  const gitRepo = join(work, "repo");
  mkdirSync(gitRepo);
  const git = (...args: string[]) => execFileSync("git", ["-C", gitRepo, ...args]).toString().trim();
  git("init", "-q", "-b", "main");
  writeFileSync(join(gitRepo, "greet.sh"), "greeting() { echo hello; }\n");
  git("add", ".");
  git("-c", "user.name=t", "-c", "user.email=t@example.invalid", "commit", "-q", "-m", "init");
  writeFileSync(join(specs, "coding.toml"),
    CODING.replace("REPO", gitRepo).replace("WORKTREES", join(work, "worktrees")));
  const line = execFileSync(arborBin, ["serve", "--hash-token", "tests"], { input: TOKEN }).toString().trim();
  writeFileSync(join(work, "tokens"), `${line}\n`);
  const port = await freePort();
  base = `http://127.0.0.1:${port}`;
  server = spawn(
    arborBin,
    ["serve", "--memory", "--specs", specs, "--tokens", join(work, "tokens"), "--listen", `127.0.0.1:${port}`,
      "--max-streams-per-tenant", "4"],
    { stdio: "ignore", env: { ...process.env, ARBOR_LOG: "warn" } },
  );
  const deadline = Date.now() + 20_000;
  for (;;) {
    try {
      if ((await fetch(`${base}/readyz`)).ok) break;
    } catch {
      // Not listening yet.
    }
    if (Date.now() > deadline) throw new Error("arbor serve did not start");
    await new Promise((r) => setTimeout(r, 50));
  }
});

after(() => {
  server?.kill("SIGTERM");
});

const client = () => new ArborClient({ baseUrl: base, token: TOKEN });

async function untilSuspended(events: AsyncGenerator<ServerEvent>): Promise<ServerEvent[]> {
  const seen: ServerEvent[] = [];
  for await (const e of events) {
    seen.push(e);
    if (e.event === "status" && (e.data as { status: string }).status === "suspended") {
      await events.return(undefined);
      return seen;
    }
  }
  throw new Error(`the stream ended before the run suspended: ${JSON.stringify(seen)}`);
}

async function waitFor(arbor: ArborClient, id: string, status: string) {
  const deadline = Date.now() + 20_000;
  for (;;) {
    const view = await arbor.run(id);
    if (view.status === status && view.result) return view;
    assert.ok(Date.now() < deadline, JSON.stringify(view));
    await new Promise((r) => setTimeout(r, 50));
  }
}

test("a run waits for approval, is approved, resumed and streamed", async () => {
  const arbor = client();
  const specs = await arbor.specs();
  for (const s of ["approvals", "question", "review"]) assert.ok(specs.includes(s), String(specs));
  const run = await arbor.startRun({ spec: "approvals", labels: { suite: "typescript" } });
  const root = run.root_id;
  const seen = await untilSuspended(arbor.events(root, { since: 0 }));
  const numbered = seen.filter((e) => e.id !== undefined);
  assert.equal(numbered[0]?.event, "run_started");
  const ids = numbered.map((e) => Number(e.id));
  assert.deepEqual(ids, [...ids].sort((a, b) => a - b));

  const waiting = await arbor.waitRun(root, { timeoutMs: 20_000 });
  assert.equal(waiting.status, "suspended");
  const pending = await arbor.pending(root);
  assert.equal(pending.length, 1);
  const call = pending[0]!;
  assert.deepEqual(call.path, ["publisher"]);
  const left = await arbor.approve(root, call.id, { reason: "looks right", by: "ts-suite" });
  assert.deepEqual(left.pending, []);
  await assert.rejects(arbor.reject(root, call.id), (e: unknown) => {
    assert.ok(e instanceof ArborError);
    assert.equal(e.kind, "conflict");
    assert.match(e.message, /allow_once/);
    return true;
  });
  assert.equal((await arbor.resume(root)).status, "resuming");
  const done = await waitFor(arbor, root, "succeeded");
  assert.equal(done.result?.status, "succeeded");

  // Resumed after the last id seen: only what came after it, to the end.
  const last = numbered[numbered.length - 1]!.id!;
  const rest: ServerEvent[] = [];
  for await (const e of arbor.events(root, { lastEventId: last })) rest.push(e);
  const restIds = rest.filter((e) => e.id !== undefined).map((e) => Number(e.id));
  assert.equal(restIds[0], Number(last) + 1);
  assert.equal(rest[rest.length - 1]?.event, "end");
  assert.equal((rest[rest.length - 1]?.data as { status: string }).status, "succeeded");

  const entries = [];
  for await (const e of arbor.iterTranscript(root, { limit: 3 })) entries.push(e);
  assert.deepEqual(entries.map((e) => e.seq), entries.map((_, i) => i + 1));
  assert.equal(entries.length, Math.max(...restIds));
});

test("a question is answered and reaches the child", async () => {
  const arbor = client();
  const root = (await arbor.startRun({ spec: "question" })).root_id;
  await arbor.waitRun(root, { timeoutMs: 20_000 });
  const [call] = await arbor.pending(root);
  assert.equal(call?.question?.question, "Which colour for the fence?");
  assert.deepEqual(call?.question?.choices, ["blue", "green"]);
  await assert.rejects(arbor.answer(root, call!.id, "red"), (e: unknown) => {
    assert.ok(e instanceof ArborError);
    assert.equal(e.kind, "validation");
    assert.equal(e.field, "decisions[0].answer");
    return true;
  });
  await arbor.answer(root, call!.id, "green");
  await arbor.resume(root);
  const done = await waitFor(arbor, root, "succeeded");
  assert.equal(done.result?.text, "The fence is painted.");
});

test("listings page and filter", async () => {
  const arbor = client();
  const batch = Math.random().toString(36).slice(2, 10);
  const started: string[] = [];
  for (let i = 0; i < 5; i++) started.push((await arbor.startRun({ spec: "review", labels: { batch } })).root_id);
  for (const id of started) await arbor.waitRun(id, { timeoutMs: 20_000 });
  const page = await arbor.runs({ limit: 2, label: `batch:${batch}` });
  assert.equal(page.runs.length, 2);
  assert.ok(page.next_cursor);
  const listed: string[] = [];
  for await (const r of arbor.iterRuns({ limit: 2, label: `batch:${batch}` })) listed.push(r.id);
  assert.deepEqual([...listed].sort(), [...started].sort());
});

test("the tree streams until it ends", async () => {
  const arbor = client();
  const run = await arbor.startRun({ spec: "review" });
  const snapshots = [];
  for await (const s of arbor.treeEvents(run.root_id)) snapshots.push(s);
  const last = snapshots[snapshots.length - 1]!;
  assert.equal(last.root_id, run.root_id);
  assert.ok(last.nodes.every((n) => n.status === "succeeded"), JSON.stringify(last.nodes.map((n) => n.status)));
});

test("errors carry kind, field and limit", async () => {
  const arbor = client();
  await assert.rejects(arbor.startRun({ spec: "no-such-spec" }), (e: unknown) => {
    assert.ok(e instanceof ArborError);
    assert.equal(e.kind, "not_found");
    assert.equal(e.status, 404);
    assert.equal(e.field, "spec");
    return true;
  });
  await assert.rejects(arbor.runs({ limit: 100_000 }), (e: unknown) => {
    assert.ok(e instanceof ArborError);
    assert.equal(e.field, "limit");
    return true;
  });
  const stranger = new ArborClient({ baseUrl: base, token: "wrong" });
  await assert.rejects(stranger.specs(), (e: unknown) => e instanceof ArborError && e.kind === "unauthorized");
  const root = (await arbor.startRun({ spec: "approvals" })).root_id;
  await arbor.waitRun(root, { timeoutMs: 20_000 });
  const streams = Array.from({ length: 4 }, () => arbor.events(root));
  try {
    for (const s of streams) await s.next();
    await assert.rejects(arbor.events(root).next(), (e: unknown) => {
      assert.ok(e instanceof ArborError);
      assert.equal(e.kind, "limit");
      assert.equal(e.status, 429);
      assert.equal(e.limit?.name, "max_streams_per_tenant");
      assert.equal(e.limit?.maximum, 4);
      return true;
    });
  } finally {
    for (const s of streams) await s.return(undefined);
  }
});

/** A loopback proxy to the server that cuts the first `cuts` event streams after `after`
 * bytes, mid-event, as a broken network would; it counts the Last-Event-ID headers seen. */
async function cuttingProxy(cuts: number, after: number) {
  const { createServer: tcp, connect } = await import("node:net");
  const upstream = Number(new URL(base).port);
  const seen = { cut: 0, resumedWith: [] as string[] };
  const server = tcp((client) => {
    const up = connect(upstream, "127.0.0.1");
    let head = "";
    let decided = false;
    let cut = false;
    let sent = 0;
    client.on("data", (chunk) => {
      if (!decided) {
        head += chunk.toString("latin1");
        const end = head.indexOf("\r\n\r\n");
        if (end >= 0) {
          decided = true;
          const first = head.slice(0, head.indexOf("\r\n"));
          const resumed = /^last-event-id:\s*(.*)$/im.exec(head.slice(0, end));
          if (resumed) seen.resumedWith.push(resumed[1]!.trim());
          if (first.startsWith("GET ") && first.includes("/events") && seen.cut < cuts) {
            seen.cut += 1;
            cut = true;
          }
        }
      }
      up.write(chunk);
    });
    up.on("data", (chunk) => {
      if (!cut) { client.write(chunk); return; }
      const room = after - sent;
      if (room > 0) client.write(chunk.subarray(0, room));
      sent += chunk.length;
      if (sent >= after) { client.destroy(); up.destroy(); }
    });
    up.on("end", () => client.end());
    client.on("end", () => up.end());
    up.on("error", () => client.destroy());
    client.on("error", () => up.destroy());
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", () => r()));
  const address = server.address();
  const port = typeof address === "object" && address ? address.port : 0;
  return { port, seen, close: () => server.close() };
}

test("a broken stream resumes with the last id and loses nothing", async () => {
  const arbor = client();
  const root = (await arbor.startRun({ spec: "approvals" })).root_id;
  await arbor.waitRun(root, { timeoutMs: 20_000 });
  const [call] = await arbor.pending(root);
  await arbor.approve(root, call!.id);
  await arbor.resume(root);
  assert.equal((await arbor.waitRun(root, { timeoutMs: 20_000 })).status, "succeeded");
  const whole: ServerEvent[] = [];
  for await (const e of arbor.events(root, { since: 0 })) if (e.id !== undefined) whole.push(e);

  const proxy = await cuttingProxy(2, 900);
  try {
    const cut = new ArborClient({ baseUrl: `http://127.0.0.1:${proxy.port}`, token: TOKEN });
    const got: ServerEvent[] = [];
    for await (const e of cut.events(root, { since: 0 })) got.push(e);
    assert.equal(proxy.seen.cut, 2);
    assert.equal(proxy.seen.resumedWith.length, 2, JSON.stringify(proxy.seen));
    const numbered = got.filter((e) => e.id !== undefined);
    assert.deepEqual(numbered.map((e) => e.id), whole.map((e) => e.id));
    assert.deepEqual(numbered.map((e) => e.data), whole.map((e) => e.data));
    assert.equal(got[got.length - 1]?.event, "end");
  } finally {
    proxy.close();
  }
});

test("a coding child's work is diffed, merged once and discarded", async () => {
  const arbor = client();
  const run = await arbor.startRun({ spec: "coding" });
  const root = run.root_id;
  const done = await arbor.waitRun(root, { timeoutMs: 20_000 });
  assert.equal(done.status, "succeeded");
  const kid = (await arbor.children(root)).children[0];
  assert.ok(kid);
  const child = kid.id;
  const diff = await arbor.diff(child, { max_bytes: 65536 });
  assert.deepEqual(diff.files.map((f) => [f.path, f.added, f.removed]), [["greet.sh", 1, 1]]);
  assert.ok(diff.patch.includes("+greeting() { echo Hello; }"));
  await assert.rejects(arbor.merge(child, { expect_tip: "0".repeat(40) }),
    (e: unknown) => e instanceof ArborError && e.status === 409);
  const merged = await arbor.merge(child, { expect_tip: diff.tip });
  assert.equal(merged.merged, true);
  assert.equal(merged.already_merged, false);
  const again = await arbor.merge(child);
  assert.equal(again.already_merged, true);
  assert.equal(again.commit, merged.commit);
  const gone = await arbor.discard(child);
  assert.equal(gone.branch, diff.branch);
});
