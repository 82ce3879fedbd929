import type { TraceContext } from "../../tracing/trace-context";

/** What is known about one request by the time it ends: for its log line and its metrics. */
export interface RequestRecord {
  requestId: string;
  method: string;
  route: string;
  startedAt: number;
  model?: string;
  /** The model the caller asked for, when a fallback answered instead (`model` is the fallback). */
  fallbackFrom?: string;
  /** The upstream server its call went to last (the one that answered, or failed), as the console shows it. */
  upstreamServer?: string;
  organizationId?: string;
  keyId?: string;
  /**
   * The caller's address, when its key is bound to networks or every request's is logged (SLUICE_LOG_CLIENT_IP):
   * finding it costs about 1 µs (see ClientAddresses).
   */
  clientAddress?: string;
  status?: number;
  code?: string;
  outcome?: string;
  ruleId?: string;
  promptTokens?: number;
  completionTokens?: number;
  reasoningTokens?: number;
  cachedTokens?: number;
  firstTokenAt?: number;
  /** How long the request waited in its model's queue (its fallbacks' too), when it had to wait. */
  queuedMs?: number;
  /** Set for streams: the record is finished when the stream ends, not when the response starts. */
  deferred?: boolean;
  /** The request's trace: recorded (src/tracing), or the caller's passed on to the upstream; the log line names it. */
  trace?: TraceContext;
}

// Kept on the request itself rather than in a WeakMap keyed by it: a WeakMap gains an entry per request that only a
// collection removes, and whole answers a second rose by a paired 4-5% without it (bench/HISTORY.md).
const recordKey = Symbol("sluice.record");
type Recorded = Request & { [recordKey]?: RequestRecord };

/**
 * Starts a request's record, every field it may gain written out at once: filled in later, a record made with four
 * fields changed its shape and grew its storage a dozen times a request.
 */
export function startRecord(request: Request, requestId: string, route: string): RequestRecord {
  const record: RequestRecord = {
    requestId,
    method: request.method,
    route,
    startedAt: performance.now(),
    model: undefined,
    fallbackFrom: undefined,
    upstreamServer: undefined,
    organizationId: undefined,
    keyId: undefined,
    clientAddress: undefined,
    status: undefined,
    code: undefined,
    outcome: undefined,
    ruleId: undefined,
    promptTokens: undefined,
    completionTokens: undefined,
    reasoningTokens: undefined,
    cachedTokens: undefined,
    firstTokenAt: undefined,
    queuedMs: undefined,
    deferred: undefined,
    trace: undefined,
  };
  (request as Recorded)[recordKey] = record;
  return record;
}

export function recordOf(request: Request): RequestRecord | undefined {
  return (request as Recorded)[recordKey];
}

/** The upstream server a call went to (the pool sets it on the call; the demo backend has none). */
export function noteServer(record: RequestRecord | undefined, server: string | undefined): void {
  if (record && server !== undefined) record.upstreamServer = server;
}

/** The answer goes on after the response started (a stream): its log line is written when it ends. */
export function deferRecord(record: RequestRecord | undefined): void {
  if (record) record.deferred = true;
}

/** The first token went out (for the time-to-first-token metric). */
export function noteFirstToken(record: RequestRecord | undefined): void {
  if (record && record.firstTokenAt === undefined) record.firstTokenAt = performance.now();
}

/** The request waited this long for a model's slot. */
export function noteQueueWait(record: RequestRecord | undefined, milliseconds: number): void {
  if (record) record.queuedMs = (record.queuedMs ?? 0) + milliseconds;
}

/** A stream failed after its response started: the error code goes in its log line. */
export function noteFailure(record: RequestRecord | undefined, code: string): void {
  if (record) record.code = code;
}

/** How the request ended and what it was billed. */
export function noteBilled(
  record: RequestRecord | undefined,
  ending: { outcome: string; ruleId?: string | null },
  usage: { promptTokens: number; completionTokens: number; reasoningTokens: number; cachedTokens: number },
): void {
  if (!record) return;
  record.outcome = ending.outcome;
  record.ruleId = ending.ruleId ?? undefined;
  record.promptTokens = usage.promptTokens;
  record.completionTokens = usage.completionTokens;
  record.reasoningTokens = usage.reasoningTokens;
  record.cachedTokens = usage.cachedTokens;
}
