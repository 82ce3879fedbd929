// A request that Sluice records: a server span for the request, and a client span for each upstream call (each send:
// another server, a fallback, the output limit renamed), whose id goes upstream as the parent in `traceparent`, so
// the model server's spans sit under the call that made them. Attribute names follow OpenTelemetry's semantic
// conventions for HTTP and for generative AI (gen_ai.*); what they have no name for is under sluice.*.

import { SluiceError } from "../errors";
import type { RequestRecord } from "../modules/observability/request-record";
import type { BackendRequest } from "../upstream/types";
import type { SpanExporter } from "./exporter";
import { randomHexId, SpanKind, StatusCode, type Span } from "./span";
import type { CallerContext, TraceContext } from "./trace-context";

/** The gen_ai operation of each route that runs a model. */
const operations: Record<string, string> = {
  "/v1/chat/completions": "chat",
  "/v1/responses": "chat",
  "/v1/messages": "chat",
  "/v1/completions": "text_completion",
  "/v1/embeddings": "embeddings",
};

interface CallAddress {
  /** The URL without credentials or query. */
  full: string;
  host: string;
  port: number;
}

/** The gen_ai operation of an upstream call, from the route it goes to (its address without the query). */
function upstreamOperation(request: BackendRequest, address: CallAddress): string {
  if (request.textCompletion) return "text_completion";
  return address.full.endsWith("/embeddings") ? "embeddings" : "chat";
}

/** Each upstream route's address, parsed once: the routes are the configuration's, a few. */
const addresses = new Map<string, CallAddress>();

function addressOf(url: string): CallAddress {
  let address = addresses.get(url);
  if (address === undefined) {
    const parsed = new URL(url);
    address = {
      full: `${parsed.protocol}//${parsed.host}${parsed.pathname}`,
      host: parsed.hostname,
      port: Number(parsed.port || (parsed.protocol === "https:" ? 443 : 80)),
    };
    addresses.set(url, address);
  }
  return address;
}

function failureCode(failure: unknown): string {
  return failure instanceof SluiceError ? failure.code : "error";
}

export class RequestTrace implements TraceContext {
  readonly recording = true;
  readonly traceId: string;
  private readonly spanId = randomHexId(8);
  private readonly parentSpanId: string | undefined;
  private readonly traceState: string | undefined;
  /** The upstream call under way, until it ends. */
  private call: Span | undefined;

  constructor(
    private readonly exporter: SpanExporter,
    caller: CallerContext | undefined,
    traceId: string,
  ) {
    this.traceId = traceId;
    this.parentSpanId = caller?.spanId;
    this.traceState = caller?.tracestate;
  }

  callHeaders(request: BackendRequest, url: string, sendId: string): Record<string, string> {
    // A call sent again on the same server (its output limit renamed) ended with its refusal.
    if (this.call) this.finishCall(undefined);
    const address = addressOf(url);
    const operation = upstreamOperation(request, address);
    const model = typeof request.body.model === "string" ? request.body.model : undefined;
    const call: Span = {
      traceId: this.traceId,
      spanId: randomHexId(8),
      parentSpanId: this.spanId,
      traceState: this.traceState,
      name: model === undefined ? operation : `${operation} ${model}`,
      kind: SpanKind.client,
      startedAt: performance.now(),
      endedAt: 0,
      attributes: {
        "gen_ai.operation.name": operation,
        "gen_ai.request.model": model,
        "http.request.method": "POST",
        "url.full": address.full,
        "server.address": address.host,
        "server.port": address.port,
        "sluice.upstream_request_id": sendId,
        "http.response.status_code": undefined,
        "error.type": undefined,
      },
      events: [],
      status: { code: StatusCode.unset },
    };
    this.call = call;
    const traceparent = `00-${this.traceId}-${call.spanId}-01`;
    return this.traceState === undefined ? { traceparent } : { traceparent, tracestate: this.traceState };
  }

  callAnswered(status: number): void {
    if (this.call) this.call.attributes["http.response.status_code"] = status;
  }

  callEnded(failure: unknown): void {
    if (this.call) this.finishCall(failure);
  }

  private finishCall(failure: unknown): void {
    const call = this.call as Span;
    this.call = undefined;
    call.endedAt = performance.now();
    const status = call.attributes["http.response.status_code"];
    if (failure !== undefined) {
      const code = failureCode(failure);
      call.attributes["error.type"] = code;
      call.status = { code: StatusCode.error, message: code };
    } else if (typeof status === "number" && status >= 400) {
      call.attributes["error.type"] = String(status);
      call.status = { code: StatusCode.error };
    }
    this.exporter.add(call);
  }

  end(record: RequestRecord): void {
    if (this.call) this.finishCall(undefined);
    const status = record.status ?? 200;
    const failed = status >= 500;
    const span: Span = {
      traceId: this.traceId,
      spanId: this.spanId,
      parentSpanId: this.parentSpanId,
      traceState: this.traceState,
      name: `${record.method} ${record.route}`,
      kind: SpanKind.server,
      startedAt: record.startedAt,
      endedAt: performance.now(),
      attributes: {
        "http.request.method": record.method,
        "http.route": record.route,
        "url.path": record.route,
        "http.response.status_code": status,
        "error.type": failed ? (record.code ?? String(status)) : undefined,
        "gen_ai.operation.name": operations[record.route],
        "gen_ai.request.model": record.fallbackFrom ?? record.model,
        "gen_ai.response.model": record.model,
        "gen_ai.usage.input_tokens": record.promptTokens,
        "gen_ai.usage.output_tokens": record.completionTokens,
        "sluice.request_id": record.requestId,
        "sluice.organization_id": record.organizationId,
        "sluice.key_id": record.keyId,
        "sluice.error_code": record.code,
        "sluice.outcome": record.outcome,
        "sluice.rule_id": record.ruleId,
        "sluice.fallback_from": record.fallbackFrom,
        "sluice.upstream_server": record.upstreamServer,
        "sluice.usage.reasoning_tokens": record.reasoningTokens,
        "sluice.usage.cached_tokens": record.cachedTokens,
        "sluice.queue_wait_ms": record.queuedMs,
      },
      events: record.firstTokenAt === undefined ? [] : [{ name: "first_token", at: record.firstTokenAt }],
      status: failed ? { code: StatusCode.error, message: record.code ?? String(status) } : { code: StatusCode.unset },
    };
    this.exporter.add(span);
  }
}
