/**
 * A typed client for arbor's HTTP API (`/v1`). The paths and models are generated from the
 * OpenAPI document `arbor serve` publishes (openapi-typescript, `src/schema.ts`) and sent
 * through openapi-fetch; this layer adds what a generator does badly: event streams as async
 * iterators that resume with `Last-Event-ID`, waiting on a run, deciding approvals and
 * answering questions, paging, and errors thrown as {@link ArborError} carrying the server's
 * `kind`, `field` and `limit`.
 *
 * ```ts
 * const arbor = new ArborClient({ baseUrl: "http://127.0.0.1:7700", token });
 * const run = await arbor.startRun({ spec: "approvals" });
 * await arbor.waitRun(run.root_id);
 * for (const call of await arbor.pending(run.root_id)) await arbor.approve(run.root_id, call.id);
 * await arbor.resume(run.root_id);
 * ```
 *
 * @module
 */

import createClient, { type Client } from "openapi-fetch";

import type { components, paths } from "./schema.js";
import { parseEvents, type ServerEvent } from "./sse.js";

export type { components, paths } from "./schema.js";
export type { ServerEvent } from "./sse.js";

type S = components["schemas"];
export type RunView = S["RunView"];
export type RunList = S["RunList"];
export type RunSummary = S["RunSummary"];
export type StartRunRequest = S["StartRunRequest"];
export type SessionView = S["SessionView"];
export type ChildrenView = S["ChildrenView"];
export type TranscriptPage = S["TranscriptPage"];
export type ApprovalsView = S["ApprovalsView"];
export type SuspensionView = S["SuspensionView"];
export type PendingView = S["PendingView"];
export type DecisionInput = S["DecisionInput"];
export type ResumeView = S["ResumeView"];
export type CancelView = S["CancelView"];
export type DeletedView = S["DeletedView"];
export type SpawnRequest = S["SpawnRequest"];
export type HandleView = S["HandleView"];
export type AnswerView = S["AnswerView"];
export type DelegationState = S["DelegationState"];
export type MessageRequest = S["MessageRequest"];
export type ReceiptView = S["ReceiptView"];
export type TreeSnapshot = S["TreeSnapshot"];
export type FeedEntry = S["FeedEntry"];
export type DiffView = S["DiffView"];
export type MergeView = S["MergeView"];
export type DiscardView = S["DiscardView"];
export type MergeRequest = S["MergeRequest"];
export type ErrorKind = S["ErrorKind"];
export type LimitBody = S["LimitBody"];

/** A session's status once its run has stopped (answered, failed, waiting for a person). */
export const SETTLED: ReadonlySet<string> = new Set([
  "succeeded",
  "failed",
  "aborted",
  "suspended",
  "denied",
  "interrupted",
]);

/** How long a broken event stream is resumed (`Last-Event-ID`) without progress, in ms. */
export const RECONNECT_MS = 60_000;

/** Answers to a stream request that a restarting server or proxy gives: retried. */
const RETRIED = new Set([429, 502, 503, 504]);

/** A request the server refused or failed: its `kind` (`validation`, `not_found`, `limit`,
 * …), the request `field` at fault when there is one, the `limit` that refused it, and the
 * HTTP `status`. */
export class ArborError extends Error {
  readonly kind: ErrorKind | "unknown";
  readonly status: number;
  readonly field: string | undefined;
  readonly limit: LimitBody | undefined;

  constructor(
    message: string,
    init: { kind: ErrorKind | "unknown"; status: number; field?: string | null; limit?: LimitBody | null },
  ) {
    super(message);
    this.name = "ArborError";
    this.kind = init.kind;
    this.status = init.status;
    this.field = init.field ?? undefined;
    this.limit = init.limit ?? undefined;
  }
}

/** The typed error a failed response carries. */
function failure(response: Response, body: unknown): ArborError {
  const error = (body as { error?: S["ErrorBody"] } | undefined)?.error;
  if (!error || typeof error !== "object") {
    return new ArborError(`HTTP ${response.status}`, {
      kind: response.status >= 500 ? "internal" : "unknown",
      status: response.status,
    });
  }
  return new ArborError(error.message, {
    kind: error.kind,
    status: response.status,
    field: error.field ?? null,
    limit: error.limit ?? null,
  });
}

/** The data of an openapi-fetch answer, or its error thrown. */
function ok<T>(answer: { data?: T; error?: unknown; response: Response }): T {
  if (answer.error !== undefined || !answer.response.ok) {
    throw failure(answer.response, answer.error);
  }
  return answer.data as T;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

export interface ClientOptions {
  /** Where `arbor serve` listens (default `http://127.0.0.1:7700`). */
  baseUrl?: string;
  /** A bearer token of the server's tokens file. */
  token?: string;
  /** A `fetch` to send with (default: the global one). */
  fetch?: typeof globalThis.fetch;
}

type RunsQuery = NonNullable<paths["/v1/runs"]["get"]["parameters"]["query"]>;

/** A client of one `arbor serve`: each method is one request answering with the model the
 * OpenAPI document names; a failure throws {@link ArborError}. */
export class ArborClient {
  /** The generated client, for what this layer does not wrap. */
  readonly api: Client<paths>;
  private readonly baseUrl: string;
  private readonly headers: Record<string, string>;
  private readonly fetcher: typeof globalThis.fetch;

  constructor(options: ClientOptions = {}) {
    this.baseUrl = (options.baseUrl ?? "http://127.0.0.1:7700").replace(/\/$/, "");
    this.headers = options.token ? { Authorization: `Bearer ${options.token}` } : {};
    // Called as a plain function: a browser's fetch refuses another `this`.
    this.fetcher = options.fetch ?? ((input, init) => globalThis.fetch(input, init));
    this.api = createClient<paths>({
      baseUrl: this.baseUrl,
      headers: this.headers,
      fetch: this.fetcher,
    });
  }

  // Runs.

  /** The names of the specs the server can start. */
  async specs(): Promise<string[]> {
    return ok(await this.api.GET("/v1/specs")).specs;
  }

  /** Starts a root run of a named spec (on `task`, else the spec's own). */
  async startRun(request: StartRunRequest, options: { idempotencyKey?: string } = {}): Promise<RunView> {
    const header = options.idempotencyKey ? { "Idempotency-Key": options.idempotencyKey } : {};
    return ok(await this.api.POST("/v1/runs", { body: request, params: { header } }));
  }

  /** A run: its root's status, its tree, its result once it has one. */
  async run(id: string): Promise<RunView> {
    return ok(await this.api.GET("/v1/runs/{id}", { params: { path: { id } } }));
  }

  /** One page of this tenant's runs, newest first. */
  async runs(query: RunsQuery = {}): Promise<RunList> {
    return ok(await this.api.GET("/v1/runs", { params: { query } }));
  }

  /** Every run the filters select, page after page. */
  async *iterRuns(query: Omit<RunsQuery, "cursor"> = {}): AsyncGenerator<RunSummary> {
    let cursor: string | undefined;
    for (;;) {
      const page = await this.runs(cursor ? { ...query, cursor } : query);
      yield* page.runs;
      if (!page.next_cursor) return;
      cursor = page.next_cursor;
    }
  }

  /** Waits until the run stops (it answered, failed, or waits for a decision). */
  async waitRun(id: string, options: { timeoutMs?: number; pollMs?: number } = {}): Promise<RunView> {
    const deadline = Date.now() + (options.timeoutMs ?? 60_000);
    for (;;) {
      const view = await this.run(id);
      // Its result is kept when its run ends (and dropped when a resume starts it again); a
      // run a crash interrupted has none.
      if (SETTLED.has(view.status) && (view.result || view.status === "interrupted")) return view;
      if (Date.now() >= deadline) {
        throw new Error(`run ${id} still ${view.status} after ${options.timeoutMs ?? 60_000} ms`);
      }
      await sleep(options.pollMs ?? 50);
    }
  }

  /** Resumes a run whose waiting calls are all decided (or one a crash interrupted). */
  async resume(id: string): Promise<ResumeView> {
    return ok(await this.api.POST("/v1/runs/{id}/resume", { params: { path: { id } } }));
  }

  // Sessions.

  async session(id: string): Promise<SessionView> {
    return ok(await this.api.GET("/v1/sessions/{id}", { params: { path: { id } } }));
  }

  async children(
    id: string,
    query: { limit?: number; cursor?: string; status?: string } = {},
  ): Promise<ChildrenView> {
    return ok(await this.api.GET("/v1/sessions/{id}/children", { params: { path: { id }, query } }));
  }

  async *iterChildren(id: string, query: { limit?: number; status?: string } = {}): AsyncGenerator<SessionView> {
    let cursor: string | undefined;
    for (;;) {
      const page = await this.children(id, cursor ? { ...query, cursor } : query);
      yield* page.children;
      if (!page.next_cursor) return;
      cursor = page.next_cursor;
    }
  }

  async transcript(id: string, query: { after?: number; limit?: number } = {}): Promise<TranscriptPage> {
    return ok(await this.api.GET("/v1/sessions/{id}/transcript", { params: { path: { id }, query } }));
  }

  /** Every transcript entry after `after`, oldest first. */
  async *iterTranscript(
    id: string,
    query: { after?: number; limit?: number } = {},
  ): AsyncGenerator<Record<string, unknown>> {
    let after = query.after;
    for (;;) {
      const page = await this.transcript(id, after === undefined ? { ...query } : { ...query, after });
      yield* page.entries as Record<string, unknown>[];
      if (page.next_after === undefined || page.next_after === null) return;
      after = page.next_after;
    }
  }

  async cancel(id: string): Promise<CancelView> {
    return ok(await this.api.POST("/v1/sessions/{id}/cancel", { params: { path: { id } } }));
  }

  async delete(id: string, reason?: string): Promise<DeletedView> {
    const query = reason === undefined ? {} : { reason };
    return ok(await this.api.DELETE("/v1/sessions/{id}", { params: { path: { id }, query } }));
  }

  // Coding children's work: the caller is the approver.

  /** What a coding child's branch changes against the main checkout now, a page of its patch at a time. */
  async diff(id: string, query: { offset?: number; max_bytes?: number } = {}): Promise<DiffView> {
    return ok(await this.api.GET("/v1/sessions/{id}/diff", { params: { path: { id }, query } }));
  }

  /** Merges a finished coding child's branch (only while it is at `expect_tip`, when given). */
  async merge(id: string, body: MergeRequest = {}): Promise<MergeView> {
    return ok(await this.api.POST("/v1/sessions/{id}/merge", { params: { path: { id } }, body }));
  }

  /** Throws a finished coding child's worktree and branch away (its transcript stays). */
  async discard(id: string): Promise<DiscardView> {
    return ok(await this.api.POST("/v1/sessions/{id}/discard", { params: { path: { id } } }));
  }

  // Approvals and questions.

  async approvals(id: string, query: { limit?: number; cursor?: string } = {}): Promise<ApprovalsView> {
    return ok(await this.api.GET("/v1/sessions/{id}/approvals", { params: { path: { id }, query } }));
  }

  /** Every call waiting for a decision at the session, over every page. */
  async pending(id: string): Promise<PendingView[]> {
    const out: PendingView[] = [];
    let cursor: string | undefined;
    for (;;) {
      const page = await this.approvals(id, cursor ? { cursor } : {});
      for (const s of page.suspensions) out.push(...s.pending);
      if (!page.next_cursor) return out;
      cursor = page.next_cursor;
    }
  }

  /** Records decisions (all on calls of one suspended run); answers what still waits. */
  async decide(id: string, decisions: DecisionInput[], by?: string): Promise<SuspensionView> {
    const body = by === undefined ? { decisions } : { decisions, by };
    return ok(await this.api.POST("/v1/sessions/{id}/approvals", { params: { path: { id } }, body }));
  }

  async approve(
    id: string,
    pendingId: string,
    options: { reason?: string; forRun?: boolean; by?: string } = {},
  ): Promise<SuspensionView> {
    const verdict = options.forRun ? "allow_for_run" : "allow_once";
    return this.decide(id, [{ id: pendingId, verdict, reason: options.reason ?? null }], options.by);
  }

  async reject(
    id: string,
    pendingId: string,
    options: { reason?: string; forRun?: boolean; by?: string } = {},
  ): Promise<SuspensionView> {
    const verdict = options.forRun ? "reject_for_run" : "reject_once";
    return this.decide(id, [{ id: pendingId, verdict, reason: options.reason ?? null }], options.by);
  }

  /** Answers a question an agent asked (`ask_human`). */
  async answer(id: string, pendingId: string, answer: string, options: { by?: string } = {}): Promise<SuspensionView> {
    return this.decide(id, [{ id: pendingId, answer }], options.by);
  }

  // A host acting as a parent.

  async spawn(id: string, request: SpawnRequest): Promise<HandleView | AnswerView | DelegationState> {
    return ok(await this.api.POST("/v1/sessions/{id}/children", { params: { path: { id } }, body: request }));
  }

  async delegation(id: string, delegation: string, waitMs?: number): Promise<AnswerView | DelegationState> {
    const query = waitMs === undefined ? {} : { wait_ms: waitMs };
    return ok(
      await this.api.GET("/v1/sessions/{id}/delegations/{delegation}", {
        params: { path: { id, delegation }, query },
      }),
    );
  }

  async cancelDelegation(id: string, delegation: string): Promise<DelegationState> {
    return ok(
      await this.api.POST("/v1/sessions/{id}/delegations/{delegation}/cancel", {
        params: { path: { id, delegation } },
      }),
    );
  }

  async stopDelegation(id: string, delegation: string): Promise<DelegationState> {
    return ok(
      await this.api.POST("/v1/sessions/{id}/delegations/{delegation}/stop", {
        params: { path: { id, delegation } },
      }),
    );
  }

  async message(id: string, request: MessageRequest): Promise<ReceiptView> {
    return ok(await this.api.POST("/v1/sessions/{id}/messages", { params: { path: { id } }, body: request }));
  }

  // Event streams.

  /** A session's transcript entries (`event` = the entry's kind, `id` = its sequence number)
   * and status changes (`status`), until `end`, the last event yielded. A broken connection
   * is resumed with the last id seen. */
  events(
    id: string,
    options: { since?: number; lastEventId?: string; signal?: AbortSignal } = {},
  ): AsyncGenerator<ServerEvent> {
    const query = options.since === undefined ? "" : `?since=${options.since}`;
    return this.follow(`/v1/sessions/${encodeURIComponent(id)}/events${query}`, options.lastEventId, options.signal);
  }

  /** Whole-tree snapshots of a run, at once and on every change, until the tree ends. */
  async *treeEvents(
    id: string,
    options: { lastEventId?: string; signal?: AbortSignal } = {},
  ): AsyncGenerator<TreeSnapshot> {
    for await (const e of this.follow(`/v1/runs/${encodeURIComponent(id)}/events`, options.lastEventId, options.signal)) {
      if (e.event === "tree") yield e.data as TreeSnapshot;
    }
  }

  /** The tenant's event feed (runs started and ended, approvals waiting), live. */
  async *feed(options: { since?: number; lastEventId?: string; signal?: AbortSignal } = {}): AsyncGenerator<FeedEntry> {
    const query = options.since === undefined ? "" : `?since=${options.since}`;
    for await (const e of this.follow(`/v1/events${query}`, options.lastEventId, options.signal)) {
      if (e.id !== undefined) yield e.data as FeedEntry;
    }
  }

  private async *follow(path: string, lastEventId: string | undefined, signal?: AbortSignal): AsyncGenerator<ServerEvent> {
    // Broken connections, closes without `end`, a server restarting (`end` with reason
    // `shutdown`, 502/503/504, a 429 while the old stream still holds its slot) are resumed
    // with the last id seen, for up to RECONNECT_MS without progress.
    let tries = 0;
    let stuckSince: number | undefined;
    let why = "";
    let last = lastEventId;
    for (;;) {
      if (stuckSince !== undefined && Date.now() - stuckSince > RECONNECT_MS) {
        throw new ArborError(`the event stream ${path} could not be resumed for ${RECONNECT_MS} ms (${tries} tries): ${why}`, {
          kind: "unavailable",
          status: 0,
        });
      }
      if (tries > 0) await sleep(Math.min(100 * 2 ** tries, 2000));
      const headers: Record<string, string> = { ...this.headers, Accept: "text/event-stream" };
      if (last) headers["Last-Event-ID"] = last;
      let response: Response | undefined;
      try {
        response = await this.fetcher(`${this.baseUrl}${path}`, signal ? { headers, signal } : { headers });
      } catch (e) {
        if (signal?.aborted) throw e;
        why = String(e);
      }
      // A 429 on the first try is the tenant's limit (thrown); on a reconnect it is the old
      // stream still holding its slot (retried).
      if (response && RETRIED.has(response.status) && (response.status !== 429 || tries > 0)) {
        why = `HTTP ${response.status}`;
        await response.body?.cancel().catch(() => undefined);
      } else if (response && (!response.ok || !response.body)) {
        const body = await response.json().catch(() => undefined);
        throw failure(response, body);
      } else if (response?.body) {
        why = "the stream closed without its end";
        try {
          for await (const event of parseEvents(response.body)) {
            if (event.id !== undefined && event.id !== last) {
              // Progress: the budget starts again.
              last = event.id;
              tries = 0;
              stuckSince = undefined;
            }
            if (event.event === "") continue;
            if (event.event === "end") {
              if ((event.data as { reason?: string } | undefined)?.reason === "shutdown") {
                why = "the server shut down";
                break;
              }
              yield event;
              return;
            }
            yield event;
          }
        } catch (e) {
          if (signal?.aborted) throw e;
          why = String(e);
        }
      }
      tries += 1;
      stuckSince ??= Date.now();
    }
  }
}
