// The whole of the work Sluice does for a whole answer, with every product check on, written in the simplest way:
// one Bun.serve handler on one thread, no framework, no layers. `make bench` reports Sluice against it, so that a
// run shows how much of the gap to the bare proxy the checks themselves cost and how much is Sluice's own.
//   - the key: `Authorization: Bearer`, its SHA-256 looked up among the keys read at start, compared in constant
//     time; a revoked key stops at once: one read of Sluice's change counter per turn of the event loop
//   - the body: JSON parsed, the fields Sluice needs checked (model, messages with roles and text content)
//   - admission: the plan's 5-hour and monthly token quotas and its concurrency cap, in memory, reserved before the
//     call and settled with the real usage after it; the x-ratelimit-* headers of the 5-hour quota
//   - the red-line rules (Sluice's defaults) on the prompt's text and on the answer's
//   - the upstream call: its own abort controller, aborted when the client leaves or the model's time limit passes;
//     the request id in `x-request-id`, and the caller's `traceparent` when it sent one
//   - the ledger row, in Sluice's own database and write set (usage_ledger with every index, the per-minute and
//     per-month aggregates): group-committed on this thread once per turn, the answer sent after its commit (see
//     below). Keys' last-used times once a second.
//   - a stream (`"stream": true`): see streamAnswer
//   - a JSON log line per request (buffered, written every 5 ms), request metrics (count by status, a latency
//     histogram), the request id (a UUIDv7) in `x-request-id`
// REFERENCE_SKIP=auth,admission,safety,ledger,log (any of them) leaves checks out, to price each one.
// REFERENCE_SLUICE=ledger,backend,observability,idle-timeout (any of them) does the same work through Sluice's own
// component instead (its Ledger class and writer thread; its OpenAIBackend and answer body; its log line and metrics;
// the idle timeout lifted per request), to see whether one costs more than the simplest code (bench/same-process.ts
// --with).
// Usage: BUN_CONFIG_MAX_HTTP_REQUESTS=65535 bun bench/full-reference.ts PORT UPSTREAM_BASE_URL SLUICE_DB
import { Database } from "bun:sqlite";
import { defaultSafetyRules } from "../src/config/default-rules";
import { compilePattern } from "../src/config/load";
import type { ModelConfig } from "../src/config/schema";
import { Ledger, type LedgerRow } from "../src/ledger/ledger";
import { completionText } from "../src/modules/chat/response";
import { finishRecord } from "../src/modules/observability/index";
import { callerContextOf, PassedContext } from "../src/tracing/trace-context";
import { Logger } from "../src/modules/observability/logger";
import { Metrics } from "../src/modules/observability/metrics";
import { OutputMonitor, RuleMatcher } from "../src/modules/safety/rules";
import { encodeRow, LedgerWriter, type LedgerValue } from "../src/ledger/ledger-writer";
import { OpenAIBackend } from "../src/upstream/openai-backend";
import type { Completion, Usage } from "../src/upstream/types";
import { raiseListenBacklog } from "../src/http/listen-backlog";

const port = Number(process.argv[2] ?? 9400);
const upstreamBase = process.argv[3] ?? "http://127.0.0.1:9100";
const upstreamChat = new URL(`${upstreamBase}/v1/chat/completions`);
const databasePath = process.argv[4];
if (!databasePath) throw new Error("usage: bun bench/full-reference.ts PORT UPSTREAM_BASE_URL SLUICE_DB");
const skipped = new Set((process.env.REFERENCE_SKIP ?? "").split(",").filter(Boolean));
const sluiceParts = new Set((process.env.REFERENCE_SLUICE ?? "").split(",").filter(Boolean));
for (const part of sluiceParts) {
  if (!["ledger", "backend", "observability", "idle-timeout"].includes(part)) throw new Error(`REFERENCE_SLUICE: no component ${part}`);
}

const database = new Database(databasePath, { strict: true });
database.run("PRAGMA journal_mode = WAL");
database.run("PRAGMA synchronous = NORMAL");
database.run("PRAGMA busy_timeout = 5000");

interface Key {
  id: string;
  organizationId: string;
  hash: Uint8Array;
}
const readKeys = database.query<{ id: string; organization_id: string; hash: string }, []>(
  "SELECT id, organization_id, hash FROM api_keys WHERE revoked_at IS NULL",
);
let keys = new Map<string, Key>();
function loadKeys(): void {
  keys = new Map(readKeys.all().map((row) => [row.hash, { id: row.id, organizationId: row.organization_id, hash: Buffer.from(row.hash) }]));
}
loadKeys();
const changeCounter = database.query<{ version: number }, []>("SELECT version FROM change_counter WHERE id = 1");
let lastChange = changeCounter.get()?.version ?? 0;
let changesReadThisTurn = false;
/** Once per turn of the event loop: a key revoked by another process stops working at once. */
function readChanges(): void {
  if (changesReadThisTurn) return;
  changesReadThisTurn = true;
  setImmediate(() => {
    changesReadThisTurn = false;
  });
  const version = changeCounter.get()?.version ?? 0;
  if (version === lastChange) return;
  lastChange = version;
  loadKeys();
}

class Refusal extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}

function authenticate(request: Request): Key {
  const authorization = request.headers.get("authorization");
  if (!authorization?.startsWith("Bearer ")) throw new Refusal(401, "invalid_api_key", "No key.");
  readChanges();
  const hash = Bun.SHA256.hash(authorization.slice(7).trim(), "hex");
  const key = keys.get(hash);
  const given = Buffer.from(hash);
  if (!key || key.hash.length !== given.length || !crypto.timingSafeEqual(key.hash, given)) throw new Refusal(401, "invalid_api_key", "Unknown key.");
  return key;
}

interface Message {
  role: string;
  content: string;
}
const roles = new Set(["system", "developer", "user", "assistant", "tool"]);
interface ChatBody {
  model: string;
  messages: Message[];
  stream?: boolean;
}
function validate(body: unknown): ChatBody {
  const { model, messages, stream } = (body ?? {}) as { model?: unknown; messages?: unknown; stream?: unknown };
  if (stream !== undefined && stream !== null && typeof stream !== "boolean") throw new Refusal(400, "invalid_request_error", "stream must be a boolean.");
  if (typeof model !== "string") throw new Refusal(400, "invalid_request_error", "model must be a string.");
  if (!Array.isArray(messages) || messages.length === 0) throw new Refusal(400, "invalid_request_error", "messages must be a non-empty array.");
  for (const message of messages as Message[]) {
    if (typeof message !== "object" || message === null || !roles.has(message.role) || typeof message.content !== "string") {
      throw new Refusal(400, "invalid_request_error", "Each message needs a role and text content.");
    }
  }
  return { model, messages: messages as Message[], stream: stream === true };
}

// The bench plan: quotas and a concurrency cap far above what a run uses (as bench/sluice-setup.ts configures Sluice).
const plan = { tokensPer5h: 1e12, tokensPerMonth: 1e12, maxConcurrency: 100_000 };
const maxTokens = 8192;
interface Quota {
  windowUsed: number;
  monthUsed: number;
  reserved: number;
  active: number;
}
const quotas = new Map<string, Quota>();
function admit(organizationId: string, promptEstimate: number): { quota: Quota; reserved: number; headers: Record<string, string> } {
  let quota = quotas.get(organizationId);
  if (!quota) {
    quota = { windowUsed: 0, monthUsed: 0, reserved: 0, active: 0 };
    quotas.set(organizationId, quota);
  }
  const reserved = promptEstimate + maxTokens;
  if (quota.active >= plan.maxConcurrency) throw new Refusal(429, "concurrency_limit_exceeded", "Too many requests at once.");
  if (quota.windowUsed + quota.reserved + reserved > plan.tokensPer5h || quota.monthUsed + quota.reserved + reserved > plan.tokensPerMonth) {
    throw new Refusal(429, "quota_exceeded", "Quota exceeded.");
  }
  quota.active++;
  quota.reserved += reserved;
  const headers = {
    "x-ratelimit-limit-tokens": String(plan.tokensPer5h),
    "x-ratelimit-remaining-tokens": String(plan.tokensPer5h - quota.windowUsed - quota.reserved),
    "x-ratelimit-reset-tokens": "5h0m0s",
  };
  return { quota, reserved, headers };
}
function settle(quota: Quota, reserved: number, used: number): void {
  quota.active--;
  quota.reserved -= reserved;
  quota.windowUsed += used;
  quota.monthUsed += used;
}

// The default rules compiled as Sluice's configuration compiles them (`(?i)` as the case-insensitive flag).
const rules = defaultSafetyRules.map((rule) => ({
  id: rule.id,
  name: rule.name,
  categories: rule.categories ?? [],
  patterns: (rule.patterns ?? []).map(compilePattern),
  appliesTo: { input: true, output: true },
}));
const patterns = rules.flatMap((rule) => rule.patterns);
function breaksRedLine(text: string): boolean {
  for (const pattern of patterns) if (pattern.test(text)) return true;
  return false;
}

// A stream's answer is checked as Sluice checks it: each upstream read's text with the characters before it, the
// whole window of recent output every so often (Sluice's own OutputMonitor, as the ledger is Sluice's own writer).
const outputMatcher = new RuleMatcher(rules, "output");

/** The model's time limit, kept by one coarse timer for every request in flight (as Sluice does). */
const deadlines = new Map<AbortController, number>();
const timeoutMs = 600_000;
setInterval(() => {
  const now = performance.now();
  for (const [controller, at] of deadlines) {
    if (at > now) continue;
    deadlines.delete(controller);
    controller.abort();
  }
}, 25).unref();

// Sluice's write set through Sluice's own writer (src/ledger/ledger-writer.ts): the row staged in
// usage_ledger_inbox (no index) by the commit the answer waits for, then moved in bulk into usage_ledger with its
// indexes and the per-minute and per-month aggregates every 100 ms (as Sluice's writer thread moves them), both on
// this thread. REFERENCE_LEDGER=direct moves right after each commit, before the answers are sent.
const writer = new LedgerWriter(database);
const direct = process.env.REFERENCE_LEDGER === "direct";
/** Sluice's own ledger (REFERENCE_SLUICE=ledger): staged here, moved and checkpointed by its writer thread. */
const sluiceLedger = sluiceParts.has("ledger") ? new Ledger(database) : undefined;
if (!direct && !sluiceLedger) setInterval(() => writer.move(), 100).unref();
let pendingValues: LedgerValue[] = [];
let pendingWaiters: (() => void)[] = [];
function flushRows(): void {
  const values = pendingValues;
  const waiters = pendingWaiters;
  pendingValues = [];
  pendingWaiters = [];
  writer.commit([values]);
  if (direct) writer.move();
  for (const committed of waiters) committed();
}
function recorded(row: LedgerRow): Promise<void> {
  if (skipped.has("ledger")) return Promise.resolve();
  if (sluiceLedger) return sluiceLedger.record(row);
  return new Promise((resolve) => {
    if (pendingWaiters.length === 0) setImmediate(flushRows);
    encodeRow(row, pendingValues);
    pendingWaiters.push(resolve);
  });
}
const lastUsed = new Map<string, number>();
setInterval(() => {
  writer.touchKeys([...lastUsed]);
  lastUsed.clear();
}, 1000).unref();

let logLines: string[] = [];
let logTimer: Timer | undefined;
function log(line: Record<string, unknown>): void {
  if (skipped.has("log")) return;
  logLines.push(JSON.stringify(line));
  if (logTimer !== undefined) return;
  logTimer = setTimeout(() => {
    process.stdout.write(`${logLines.join("\n")}\n`);
    logLines = [];
    logTimer = undefined;
  }, 5);
}
const statusCounts = new Map<number, number>();
const latencyBounds = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120];
const latencyCounts = new Array<number>(latencyBounds.length + 1).fill(0);
function observe(status: number, seconds: number): void {
  statusCounts.set(status, (statusCounts.get(status) ?? 0) + 1);
  let bucket = 0;
  while (bucket < latencyBounds.length && seconds > (latencyBounds[bucket] as number)) bucket++;
  latencyCounts[bucket] = (latencyCounts[bucket] ?? 0) + 1;
}

function errorResponse(error: unknown, requestId: string): Response {
  const refusal = error instanceof Refusal ? error : new Refusal(502, "upstream_error", "The upstream failed.");
  return Response.json(
    { error: { message: refusal.message, type: refusal.code, param: null, code: refusal.code } },
    { status: refusal.status, headers: { "x-request-id": requestId } },
  );
}

/** The caller of every request when the key check is left out: the first key, so rows still name a real one. */
const anonymousKey: Key = keys.values().next().value ?? { id: "none", organizationId: "none", hash: new Uint8Array() };

/** Records an answer's row (the answer waits for its commit) and its key's last use. */
function recordAnswer(
  requestId: string,
  key: Key,
  model: string,
  promptTokens: number,
  completionTokens: number,
  outcome: LedgerRow["outcome"],
  startedAt: number,
  firstTokenMs: number | null,
): Promise<void> {
  lastUsed.set(key.id, Date.now());
  return recorded({
    requestId,
    organizationId: key.organizationId,
    keyId: key.id,
    model,
    promptTokens,
    completionTokens,
    reasoningTokens: 0,
    cachedTokens: 0,
    outcome,
    errorCode: outcome === "completed" ? null : outcome,
    ruleId: null,
    usageSource: "upstream",
    startedAt,
    endedAt: Date.now(),
    firstTokenMs,
  });
}

type Admission = ReturnType<typeof admit>;

/** What a stream's relay reads of an upstream chunk. */
interface StreamChunk {
  id: string;
  model: string;
  choices?: { delta?: { content?: string | null; reasoning_content?: string | null } }[];
  usage?: { prompt_tokens?: number; completion_tokens?: number };
}

/**
 * A streamed answer: each upstream read split into events, each event parsed and re-encoded under our id and
 * model, the read's text checked against the red-line rules and kept (joined every 64 pieces) so that an answer
 * whose upstream never reports usage can still be billed, the time to the first token noted; the ledger row
 * committed before `[DONE]`; the reservation settled, and the deadline dropped, however the stream ends. (An
 * upstream that stops without `[DONE]` is not recorded: the bench's fake upstream never does, and a client that
 * leaves is not billed here, where Sluice bills what was produced. Its log line and metrics come when its headers
 * are sent, Sluice's when it ends: the same work at another moment.)
 */
async function streamAnswer(
  body: ChatBody,
  key: Key,
  requestId: string,
  traceparent: string | null,
  controller: AbortController,
  startedAt: number,
  admitted: Admission | undefined,
) {
  let upstreamResponse: Response;
  try {
    upstreamResponse = await fetch(upstreamChat, {
      method: "POST",
      headers: upstreamHeaders(requestId, traceparent),
      body: JSON.stringify({ model: "bench-upstream", messages: body.messages, max_tokens: maxTokens, stream: true, stream_options: { include_usage: true } }),
      signal: skipped.has("signal") ? undefined : controller.signal,
    });
  } catch (error) {
    deadlines.delete(controller);
    throw error;
  }
  if (upstreamResponse.status !== 200 || !upstreamResponse.body) {
    deadlines.delete(controller);
    await upstreamResponse.body?.cancel().catch(() => undefined);
    throw new Refusal(502, "upstream_error", "The upstream failed.");
  }
  const reader = upstreamResponse.body.getReader();
  const id = `chatcmpl-${requestId.slice(4)}`;
  const monitor = skipped.has("safety") ? undefined : new OutputMonitor(outputMatcher);
  /** Set when the body starts: a client that leaves before that gets no pull, and its cancel releases instead. */
  let pulled = false;
  const stream = new ReadableStream({
    type: "direct",
    async pull(sink) {
      pulled = true;
      const decoder = new TextDecoder();
      const blocks: string[] = [];
      let pieces: string[] = [];
      let buffered = "";
      let usage: StreamChunk["usage"];
      let firstTokenMs: number | null = null;
      let used = 0;
      /** The answer is over: the upstream's `[DONE]`, or a red-line stop. */
      let ended = false;
      /** The upstream's body was read to its end; otherwise it is cancelled, and with it the upstream request. */
      let upstreamDone = false;
      try {
        while (!ended) {
          const read = await reader.read();
          if (read.done) {
            upstreamDone = true;
            break;
          }
          buffered += decoder.decode(read.value, { stream: true });
          const events = buffered.split("\n\n");
          buffered = events.pop() ?? "";
          let out = "";
          let content = "";
          let reasoning = "";
          for (const event of events) {
            const data = event.slice(6);
            if (data === "[DONE]") {
              ended = true;
              upstreamDone = true;
              break;
            }
            const chunk = JSON.parse(data) as StreamChunk;
            chunk.id = id;
            chunk.model = body.model;
            const delta = chunk.choices?.[0]?.delta;
            if (delta?.content) content += delta.content;
            if (delta?.reasoning_content) reasoning += delta.reasoning_content;
            if (chunk.usage) usage = chunk.usage;
            out += `data: ${JSON.stringify(chunk)}\n\n`;
          }
          let outcome: LedgerRow["outcome"] = "completed";
          if (content || reasoning) {
            firstTokenMs ??= Date.now() - startedAt;
            if (content) pieces.push(content);
            if (reasoning) pieces.push(reasoning);
            if (pieces.length >= 64) {
              blocks.push(pieces.join(""));
              pieces = [];
            }
            if (monitor?.observe(content, reasoning)) {
              outcome = "content_filter";
              out += `data: ${JSON.stringify({ error: { message: "Stopped by a red-line rule.", type: "content_filter", code: "content_filter" } })}\n\n`;
              ended = true;
            }
          }
          if (ended) {
            const promptTokens = usage?.prompt_tokens ?? 0;
            // Without the upstream's usage, what was kept is counted (here by a rough estimate, not a tokenizer).
            const completionTokens = usage?.completion_tokens ?? Math.ceil((blocks.join("").length + pieces.join("").length) / 4);
            used = promptTokens + completionTokens;
            await recordAnswer(requestId, key, body.model, promptTokens, completionTokens, outcome, startedAt, firstTokenMs);
            out += "data: [DONE]\n\n";
          }
          if (out) {
            sink.write(out);
            await sink.flush();
          }
        }
      } finally {
        deadlines.delete(controller);
        if (admitted) settle(admitted.quota, admitted.reserved, used);
        if (!upstreamDone) await reader.cancel().catch(() => undefined);
      }
      sink.close();
    },
    cancel() {
      controller.abort();
      if (pulled) return;
      deadlines.delete(controller);
      if (admitted) settle(admitted.quota, admitted.reserved, 0);
      void reader.cancel().catch(() => undefined);
    },
  });
  return new Response(stream, { headers: { ...admitted?.headers, "content-type": "text/event-stream", "x-request-id": requestId } });
}

/** What Sluice's log line says of an answer (REFERENCE_SLUICE=observability): its caller, and its usage. */
interface Facts {
  organizationId?: string;
  keyId?: string;
  outcome?: string;
  promptTokens?: number;
  completionTokens?: number;
}

/** The upstream call's headers: its request id, and the caller's trace context when it sent one, as Sluice sends them. */
function upstreamHeaders(requestId: string, traceparent: string | null): Record<string, string> {
  const headers: Record<string, string> = { "content-type": "application/json", "x-request-id": requestId };
  if (traceparent !== null) headers.traceparent = traceparent;
  return headers;
}

async function answer(request: Request, requestId: string, facts: Facts): Promise<Response> {
  const key = skipped.has("auth") ? anonymousKey : authenticate(request);
  facts.organizationId = key.organizationId;
  facts.keyId = key.id;
  const body = skipped.has("validate") ? ((await request.json()) as ChatBody) : validate(await request.json());
  const prompt = body.messages.map((message) => message.content);
  const promptEstimate = prompt.reduce((total, text) => total + 4 + Buffer.byteLength(text), 3);
  const admitted = skipped.has("admission") ? undefined : admit(key.organizationId, promptEstimate);
  let used = 0;
  /** A stream settles its reservation when it ends, not when its first bytes are answered. */
  let streaming = false;
  try {
    if (!skipped.has("safety") && prompt.some(breaksRedLine)) throw new Refusal(400, "content_filter", "Refused by a red-line rule.");
    const controller = new AbortController();
    if (!skipped.has("signal")) {
      const onClientGone = () => controller.abort();
      request.signal.addEventListener("abort", onClientGone, { once: true });
    }
    if (!skipped.has("deadline")) deadlines.set(controller, performance.now() + timeoutMs);
    const startedAt = Date.now();
    const traceparent = request.headers.get("traceparent");
    if (body.stream) {
      const response = await streamAnswer(body, key, requestId, traceparent, controller, startedAt, admitted);
      streaming = true;
      return response;
    }
    let upstreamAnswer:
      | {
          id: string;
          model: string;
          choices: { message: { content: string | null } }[];
          usage?: { prompt_tokens?: number; completion_tokens?: number };
        }
      | undefined;
    /** REFERENCE_SLUICE=backend: what Sluice's client answered, written below as Sluice writes an answer's body. */
    let sluiceAnswer: { completion: Completion; usage: Usage } | undefined;
    try {
      const upstreamBody = { model: "bench-upstream", messages: body.messages, max_tokens: maxTokens };
      if (sluiceBackend) {
        const caller = traceparent === null ? undefined : callerContextOf(request.headers);
        const trace = caller && new PassedContext(caller);
        const completion = await sluiceBackend.complete({ model: sluiceModel, body: upstreamBody, signal: controller.signal, requestId, sent: 0, trace });
        sluiceAnswer = { completion, usage: completion.usage ?? { promptTokens: 0, completionTokens: 0, reasoningTokens: 0, cachedTokens: 0 } };
      } else {
        const upstreamResponse = await fetch(upstreamChat, {
          method: "POST",
          headers: upstreamHeaders(requestId, traceparent),
          body: JSON.stringify(upstreamBody),
          signal: skipped.has("signal") ? undefined : controller.signal,
        });
        upstreamAnswer = (await upstreamResponse.json()) as typeof upstreamAnswer;
      }
    } finally {
      deadlines.delete(controller);
    }
    const content = (sluiceAnswer ? sluiceAnswer.completion.content : upstreamAnswer?.choices[0]?.message.content) ?? "";
    if (!skipped.has("safety") && breaksRedLine(content)) throw new Refusal(400, "content_filter", "Stopped by a red-line rule.");
    const promptTokens = (sluiceAnswer ? sluiceAnswer.usage.promptTokens : upstreamAnswer?.usage?.prompt_tokens) ?? 0;
    const completionTokens = (sluiceAnswer ? sluiceAnswer.usage.completionTokens : upstreamAnswer?.usage?.completion_tokens) ?? 0;
    used = promptTokens + completionTokens;
    facts.outcome = "completed";
    facts.promptTokens = promptTokens;
    facts.completionTokens = completionTokens;
    await recordAnswer(requestId, key, body.model, promptTokens, completionTokens, "completed", startedAt, null);
    let text: string;
    if (sluiceAnswer) {
      text = completionText({ requestId, created: Math.floor(Date.now() / 1000), model: body.model }, sluiceAnswer.completion, sluiceAnswer.usage);
    } else {
      const answer = upstreamAnswer as NonNullable<typeof upstreamAnswer>;
      answer.id = `chatcmpl-${requestId.slice(4)}`;
      answer.model = body.model;
      text = JSON.stringify(answer);
    }
    return new Response(text, {
      headers: { ...admitted?.headers, "content-type": "application/json", "x-request-id": requestId },
    });
  } finally {
    if (admitted && !streaming) settle(admitted.quota, admitted.reserved, used);
  }
}

/** Sluice's upstream client (REFERENCE_SLUICE=backend); it reads only its model's two upstream time limits. */
const sluiceBackend = sluiceParts.has("backend") ? new OpenAIBackend("bench", `${upstreamBase}/v1`, undefined) : undefined;
const sluiceModel = { id: "bench", firstByteTimeoutMs: undefined, idleTimeoutMs: undefined } as ModelConfig;
/** Sluice's log line and metrics (REFERENCE_SLUICE=observability), from the facts Sluice's record holds for an answer. */
const sluiceObservability = sluiceParts.has("observability") ? { metrics: new Metrics(new Map()), logger: new Logger() } : undefined;
/** As Sluice does (REFERENCE_SLUICE=idle-timeout): connections time out when idle, lifted for each request. */
const liftIdleTimeout = sluiceParts.has("idle-timeout");

let counter = 0;
const server = Bun.serve({
  port,
  hostname: "127.0.0.1",
  idleTimeout: liftIdleTimeout ? 30 : 0,
  async fetch(request) {
    const startedAt = performance.now();
    if (liftIdleTimeout) server.timeout(request, 0);
    const requestId = skipped.has("id") ? `req_${counter++}` : `req_${Bun.randomUUIDv7().replaceAll("-", "")}`;
    const facts: Facts = {};
    let response: Response;
    try {
      response = await answer(request, requestId, facts);
    } catch (error) {
      response = errorResponse(error, requestId);
    }
    if (sluiceObservability) {
      const record = { ...facts, requestId, method: request.method, route: "/v1/chat/completions", startedAt, model: "bench", status: response.status };
      finishRecord(record, sluiceObservability.metrics, sluiceObservability.logger);
      return response;
    }
    const seconds = (performance.now() - startedAt) / 1000;
    if (!skipped.has("metrics")) observe(response.status, seconds);
    log({ time: new Date().toISOString(), level: "info", request_id: requestId, status: response.status, duration_ms: seconds * 1000 });
    return response;
  },
});
await raiseListenBacklog(server.port as number);
console.error(`full reference on ${port}${skipped.size > 0 ? ` without ${[...skipped].join(", ")}` : ""}`);
process.on("SIGTERM", () => process.exit(0));
