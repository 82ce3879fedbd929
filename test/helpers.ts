import { afterAll, beforeEach, expect } from "bun:test";
import { Database } from "bun:sqlite";
import { copyFileSync, mkdtempSync, rmSync } from "node:fs";
import http from "node:http";
import { Readable } from "node:stream";
import { tmpdir } from "node:os";
import { join } from "node:path";
import Ajv2020 from "ajv/dist/2020";
import addFormats from "ajv-formats";
import fc from "fast-check";
import OpenAI, { type APIError } from "openai";
import { resolveConfig } from "../src/config/load";
import type { ConfigFile } from "../src/config/schema";
import { openDatabase, type DatabaseHandle } from "../src/db/client";
import type { LedgerRow } from "../src/ledger/ledger";
import { stagedColumns, stageRowSql } from "../src/ledger/inbox";
import { encodeRow, type LedgerValue } from "../src/ledger/ledger-writer";
import { AuditLog, type AuditActor } from "../src/modules/audit/service";
import { AccountService } from "../src/modules/console/accounts";
import { KeyService } from "../src/modules/keys/service";
import { OrganizationService, type OrganizationStatus } from "../src/modules/organizations/service";
import { Logger } from "../src/modules/observability/logger";
import { startServer, type RunningServer } from "../src/server";
import { sqliteStorage, type SqliteStorage } from "../src/storage/sqlite";
import type { TracingSettings } from "../src/tracing/settings";
import { startFakeUpstream, type FakeUpstream } from "./fake-upstream";
import schemas from "./fixtures/openai-schemas.json" with { type: "json" };

export const repositoryRoot = join(import.meta.dir, "..");

/** A fake upstream for a whole test file: started now, stopped after its last test, optionally reset before each. */
export function useFakeUpstream({ resetBeforeEach = false } = {}): FakeUpstream {
  const upstream = startFakeUpstream();
  if (resetBeforeEach) beforeEach(() => upstream.reset());
  afterAll(() => upstream.stop());
  return upstream;
}

/**
 * Stages rows in usage_ledger_inbox as a quiet commit leaves them, but written here, so that no timer of a ledger
 * moves them first (src/ledger/inbox.ts).
 */
export function stageRows(sqlite: Database, rows: LedgerRow[]): void {
  const statement = sqlite.query(stageRowSql);
  for (const row of rows) {
    const values: LedgerValue[] = [];
    encodeRow(row, values);
    statement.run(...values);
  }
}

/** A completed ledger row of 10 prompt and 5 completion tokens as the upstream reported them; `fields` change any of it. */
export function ledgerRow(fields: Partial<LedgerRow> & Pick<LedgerRow, "requestId">): LedgerRow {
  return {
    organizationId: "org_a",
    keyId: "key_a",
    model: "m",
    promptTokens: 10,
    completionTokens: 5,
    reasoningTokens: 0,
    cachedTokens: 0,
    outcome: "completed",
    errorCode: null,
    ruleId: null,
    usageSource: "upstream",
    startedAt: 1,
    endedAt: 2,
    firstTokenMs: null,
    ...fields,
  };
}

/** A committed ledger row, staged (usage_ledger_inbox) or moved (usage_ledger): `.get(requestId)`. */
export const committedRowSql = "SELECT 1 FROM usage_ledger WHERE request_id = ?1 UNION ALL SELECT 1 FROM usage_ledger_inbox WHERE request_id = ?1 LIMIT 1";

/** Every committed ledger row, staged or moved (see src/ledger/inbox.ts), oldest first. */
export const committedRowsSql = `SELECT * FROM (SELECT ${stagedColumns} FROM usage_ledger UNION ALL SELECT ${stagedColumns} FROM usage_ledger_inbox) ORDER BY started_at`;

/**
 * Whether a ledger row is in the database file itself, without its WAL (so a checkpoint copied it there). It reads
 * a copy, as another connection would see the WAL too. A copy taken while a checkpoint is writing pages can be torn
 * (SQLITE_CORRUPT); such a copy proves nothing either way, so it counts as "not yet" and the caller tries again.
 * So does a file that no checkpoint has reached since the tables were made (they are still only in the WAL).
 */
export function rowInDatabaseFile(path: string, requestId: string): boolean {
  const copy = `${path}.copy`;
  copyFileSync(path, copy);
  const snapshot = new Database(copy, { readonly: true });
  try {
    return snapshot.query(committedRowSql).get(requestId) !== null;
  } catch (error) {
    if ((error as { code?: string }).code === "SQLITE_CORRUPT") return false;
    if (error instanceof Error && error.message.startsWith("no such table")) return false;
    throw error;
  } finally {
    snapshot.close();
    rmSync(copy, { force: true });
  }
}

/** The error an SDK call was refused with (the test expects it to be refused). */
export async function failureOf(answer: Promise<unknown>): Promise<APIError> {
  return (await answer.then(
    () => undefined,
    (caught: unknown) => caught,
  )) as APIError;
}

/** The status and error of an OpenAI SDK call that failed; status 0 when it succeeded. */
export async function refusal(call: () => Promise<unknown>): Promise<{ status: number; code?: string | null; message?: string }> {
  try {
    await call();
    return { status: 0 };
  } catch (error) {
    const failed = error as { status?: number; code?: string | null; error?: { message?: string } };
    return { status: failed.status ?? -1, code: failed.code, message: failed.error?.message };
  }
}

/** A logger whose lines a test reads back, each line parsed. */
export function capturingLogger(): { logger: Logger; lines: Record<string, unknown>[] } {
  const lines: Record<string, unknown>[] = [];
  const logger = new Logger("info", (text) =>
    lines.push(
      ...text
        .trim()
        .split("\n")
        .map((line) => JSON.parse(line) as Record<string, unknown>),
    ),
  );
  return { logger, lines };
}

/**
 * An official OpenAI client of `sluice`'s test key (the SDK's own default of 2 retries unless given) that counts the
 * HTTP requests it sends: how a test tells whether the SDK retried.
 */
export function countingClient(sluice: { baseURL: string; key: string }, maxRetries?: number): { client: OpenAI; calls: () => number } {
  let calls = 0;
  const client = new OpenAI({
    baseURL: sluice.baseURL,
    apiKey: sluice.key,
    ...(maxRetries === undefined ? {} : { maxRetries }),
    fetch: (input, init) => {
      calls++;
      return fetch(input, init);
    },
  });
  return { client, calls: () => calls };
}

/** A temporary folder removed by the returned function. */
export function temporaryDirectory(): { path: string; remove(): void } {
  const path = mkdtempSync(join(tmpdir(), "sluice-test-"));
  return { path, remove: () => rmSync(path, { recursive: true, force: true }) };
}

/** A model entry of the config pointing at the fake upstream, with the fake's behaviour as upstream model. */
export function fakeModel(upstreamUrl: string, id: string, upstreamModel = id, extra: Record<string, unknown> = {}) {
  return { id, backend: "openai" as const, base_url: upstreamUrl, upstream_model: upstreamModel, ...extra };
}

/** The audit trail's actor of changes that tests make directly through the services. */
/**
 * Models through which a request is sent three times: `flaky`'s two servers (the same fake, told apart by a query)
 * each refuse it with 429, so it is tried once on the other, then `flaky`'s fallback `m` answers.
 */
export function sentThreeTimes(upstreamUrl: string) {
  return [
    { ...fakeModel(upstreamUrl, "flaky", "overloaded-429"), base_url: [upstreamUrl, `${upstreamUrl}?server=2`], fallbacks: ["m"] },
    fakeModel(upstreamUrl, "m", "usage-10-5"),
  ];
}

export const testActor: AuditActor = { kind: "cli", name: "test" };

export interface TestSluice {
  url: string;
  baseURL: string;
  key: string;
  database: DatabaseHandle;
  storage: SqliteStorage;
  organizations: OrganizationService;
  keys: KeyService;
  accounts: AccountService;
  audit: AuditLog;
  /** An official OpenAI client with the test key; retries off unless asked for. */
  client(options?: { apiKey?: string; maxRetries?: number }): OpenAI;
  /** Creates an organization and a key for it. */
  addOrganization(name: string, options?: { plan?: string; status?: OrganizationStatus }): Promise<{ organizationId: string; key: string; keyId: string }>;
  post(path: string, body: unknown, headers?: Record<string, string>, signal?: AbortSignal): Promise<Response>;
  ledgerRows(): LedgerRowView[];
  server: RunningServer;
  stop(): Promise<void>;
  /** Closes the database and removes the server's files, for a test that stopped the server itself. */
  removeFiles(): void;
}

export interface LedgerRowView {
  request_id: string;
  organization_id: string;
  key_id: string;
  model: string;
  prompt_tokens: number;
  completion_tokens: number;
  reasoning_tokens: number;
  cached_tokens: number;
  /** Null when the model's quota_weight is 1. */
  quota_tokens: number | null;
  outcome: string;
  error_code: string | null;
  usage_source: string;
  started_at: number;
  ended_at: number;
  first_token_ms: number | null;
}

/** Starts a real Sluice server on a free port over a temporary database, with one active organization and key. */
export async function startSluice(
  configFile: ConfigFile,
  options: {
    environment?: Record<string, string>;
    maxBodyBytes?: number;
    clock?: () => number;
    databasePath?: string;
    logger?: Logger;
    metricsToken?: string;
    idleTimeoutSeconds?: number;
    heartbeatMs?: number;
    tracing?: TracingSettings;
    trustedProxies?: string[];
    corsOrigins?: { any: boolean; origins: string[] };
    logClientAddresses?: boolean;
  } = {},
): Promise<TestSluice> {
  const directory = temporaryDirectory();
  const config = resolveConfig(configFile);
  const database = openDatabase(options.databasePath ?? join(directory.path, "sluice.db"));
  const storage = sqliteStorage(database);
  const audit = new AuditLog(storage.audit);
  const organizations = new OrganizationService(storage.organizations, new Set(config.plans.map((plan) => plan.id)), audit);
  const keys = new KeyService(storage.keys, audit);
  const accounts = new AccountService(storage.accounts, audit);
  const server: RunningServer = await startServer({
    config,
    storage,
    port: 0,
    environment: options.environment,
    maxBodyBytes: options.maxBodyBytes,
    clock: options.clock,
    // Tests keep stdout quiet unless they capture the log themselves.
    logger: options.logger ?? new Logger("silent"),
    metricsToken: options.metricsToken,
    idleTimeoutSeconds: options.idleTimeoutSeconds,
    heartbeatMs: options.heartbeatMs,
    tracing: options.tracing,
    trustedProxies: options.trustedProxies,
    corsOrigins: options.corsOrigins,
    logClientAddresses: options.logClientAddresses,
  });
  const addOrganization = async (name: string, organizationOptions: { plan?: string; status?: OrganizationStatus } = {}) => {
    const organization = (await organizations.findByName(name)) ?? (await organizations.create({ name, ...organizationOptions }, testActor));
    const { key, secret } = await keys.create({ organizationId: organization.id, name: "test" }, testActor);
    return { organizationId: organization.id, key: secret, keyId: key.id };
  };
  const first = await addOrganization("acme", { plan: config.plans[0]?.id });
  const baseURL = `${server.url}/v1`;
  const removeFiles = () => {
    database.close();
    directory.remove();
  };
  return {
    url: server.url,
    baseURL,
    key: first.key,
    database,
    storage,
    organizations,
    keys,
    accounts,
    audit,
    client: (clientOptions = {}) => new OpenAI({ baseURL, apiKey: clientOptions.apiKey ?? first.key, maxRetries: clientOptions.maxRetries ?? 0 }),
    addOrganization,
    post: (path, body, headers = {}, signal) =>
      httpPost(
        `${server.url}${path}`,
        typeof body === "string" ? body : JSON.stringify(body),
        { authorization: `Bearer ${first.key}`, "content-type": "application/json", ...headers },
        signal,
      ),
    ledgerRows: () => database.sqlite.query<LedgerRowView, []>(committedRowsSql).all(),
    server,
    async stop() {
      await server.stop();
      removeFiles();
    },
    removeFiles,
  };
}

/** Runs a test body against a fresh server and always stops it. */
export async function withSluice(
  configFile: ConfigFile,
  run: (sluice: TestSluice) => Promise<void>,
  options: Parameters<typeof startSluice>[1] = {},
): Promise<void> {
  const sluice = await startSluice(configFile, options);
  try {
    await run(sluice);
  } finally {
    await sluice.stop();
  }
}

const ajv = new Ajv2020({ strict: false, allErrors: true });
addFormats(ajv);
ajv.addFormat("unixtime", { type: "number", validate: (value: number) => Number.isInteger(value) });
ajv.addSchema(schemas, "openai");

/** Validates a body against one of OpenAI's official schemas in ../shared/reference; returns the errors. */
export function schemaErrors(
  name: "CreateChatCompletionResponse" | "CreateChatCompletionStreamResponse" | "ListModelsResponse" | "Model" | "ErrorResponse",
  body: unknown,
): string[] {
  const validate = ajv.getSchema(`openai#/$defs/${name}`);
  if (!validate) throw new Error(`no schema ${name}`);
  return validate(body) ? [] : (validate.errors ?? []).map((error) => `${error.instancePath} ${error.message}`);
}

const agent = new http.Agent({ keepAlive: true, maxSockets: Number.POSITIVE_INFINITY });

/**
 * POST through node:http, as a web Response. Tests fire hundreds of requests at a server running in the same
 * process: Bun's fetch allows 256 at once per process (and `bun test` ignores BUN_CONFIG_MAX_HTTP_REQUESTS), so a
 * fetch-based client would hold the slots the server needs for its own upstream calls. node:http has no such cap.
 */
export function httpPost(url: string, body: string, headers: Record<string, string>, signal?: AbortSignal): Promise<Response> {
  return new Promise((resolve, reject) => {
    const request = http.request(
      url,
      { method: "POST", headers: { ...headers, "content-length": String(Buffer.byteLength(body)) }, agent, signal },
      (incoming) => {
        const responseHeaders = new Headers();
        for (const [name, value] of Object.entries(incoming.headers)) {
          if (value !== undefined) responseHeaders.set(name, Array.isArray(value) ? value.join(", ") : value);
        }
        const stream = Readable.toWeb(incoming) as ReadableStream<Uint8Array>;
        resolve(new Response(stream, { status: incoming.statusCode, headers: responseHeaders }));
      },
    );
    request.on("error", reject);
    request.end(body);
  });
}

/** One `chat.completion.chunk` as a test reads it. */
export interface StreamChunk {
  id: string;
  object: string;
  model: string;
  choices: { index: number; delta: { role?: string; content?: string; reasoning_content?: string; [field: string]: unknown }; finish_reason: string | null }[];
  usage: { prompt_tokens: number; completion_tokens: number; total_tokens: number; completion_tokens_details?: { reasoning_tokens: number } } | null;
}

/** Reads an SSE response into its `data:` payloads, parsed when JSON, `[DONE]` kept as a string. */
export async function readSse(response: Response): Promise<unknown[]> {
  const text = await response.text();
  return text
    .split("\n\n")
    .filter((event) => event.startsWith("data: "))
    .map((event) => event.slice(6))
    .map((data) => (data === "[DONE]" ? data : JSON.parse(data)));
}

/** Waits until a condition holds (for effects that happen just after a response ends). */
export async function eventually(condition: () => boolean, timeoutMs = 5000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error("condition not met in time");
    await Bun.sleep(10);
  }
}

/** The error code of an answer (its body read); null for a 200, whose body is discarded. */
export async function codeOf(response: Response): Promise<string | null> {
  if (response.status === 200) {
    await response.arrayBuffer();
    return null;
  }
  return ((await response.json()) as { error: { code: string } }).error.code;
}

/**
 * What a burst against a 5-hour quota with little room must get, wherever it is served: only 200s and 429s, at
 * least `minimumAnswered` answers, every 429 `rate_limit_exceeded` with `x-should-retry: false` and a Retry-After of
 * more than 4 hours, every answer the x-ratelimit headers of the quota. Returns the answers.
 */
export async function expectFiveHourQuotaAnswers(responses: Response[], quota: number, minimumAnswered: number): Promise<Response[]> {
  const succeeded = responses.filter((response) => response.status === 200);
  const rejected = responses.filter((response) => response.status === 429);
  expect(succeeded.length + rejected.length).toBe(responses.length);
  expect(succeeded.length).toBeGreaterThanOrEqual(minimumAnswered);
  for (const response of rejected) {
    expect(response.headers.get("x-should-retry")).toBe("false");
    expect(Number(response.headers.get("retry-after"))).toBeGreaterThan(4 * 3600);
    expect(await codeOf(response)).toBe("rate_limit_exceeded");
  }
  for (const response of succeeded) {
    expect(response.headers.get("x-ratelimit-limit-tokens")).toBe(String(quota));
    expect(Number(response.headers.get("x-ratelimit-remaining-tokens"))).toBeLessThan(quota);
    expect(response.headers.get("x-ratelimit-reset-tokens")).toMatch(/^(\d+h)?(\d+m)?\d+s$/);
  }
  return succeeded;
}

/** Any value a wrong field may hold (strings, numbers, booleans, null, small arrays and objects), for properties of bad input. */
export const anyFieldValue = fc.oneof(
  fc.string(),
  fc.integer(),
  fc.double(),
  fc.boolean(),
  fc.constant(null),
  fc.array(fc.anything(), { maxLength: 3 }),
  fc.object({ maxDepth: 2 }),
);

/** Fails unless a plain chat request to `model` still gets its answer: the server outlived what came before. */
export async function expectStillServes(sluice: TestSluice, model = "m"): Promise<void> {
  const response = await sluice.post("/v1/chat/completions", { model, messages: [{ role: "user", content: "hi" }] });
  expect(response.status).toBe(200);
  await response.arrayBuffer();
}
