import { SluiceError, UpstreamError } from "../../errors";
import type { Ledger, LedgerRow } from "../../ledger/ledger";
import { ClientGoneError } from "../../upstream/errors";
import type { CompletionEvent, Usage } from "../../upstream/types";
import type { Caller } from "../auth/service";
import type { ModelRegistry } from "../models/registry";
import { UsageMeter } from "./meter";
import type { ChatRequest } from "./model";
import { prepareRequest, type PreparedRequest } from "./prepare";
import { completionBody, eventChunk, roleChunk, usageChunk, type ResponseIdentity } from "./response";

/** What one request needs besides its body: who asks, its id, and the signal that fires when the client leaves. */
export interface RequestContext {
  caller: Caller;
  requestId: string;
  signal: AbortSignal;
}

export type ChatResult =
  | { kind: "whole"; body: ReturnType<typeof completionBody> }
  /** Chunks (or a final `{error}`) to send as SSE; the stream ends with `[DONE]` once the generator returns. */
  | { kind: "stream"; chunks: AsyncGenerator<unknown> };

type Outcome = LedgerRow["outcome"];

function outcomeOf(error: unknown): { outcome: Outcome; errorCode: string | null } {
  if (error instanceof ClientGoneError) return { outcome: "client_disconnected", errorCode: null };
  if (error instanceof SluiceError) return { outcome: "upstream_error", errorCode: error.code };
  return { outcome: "upstream_error", errorCode: "upstream_error" };
}

/** Whether the upstream did work for this request, so that it belongs in the ledger. */
function reachedUpstream(error: unknown): boolean {
  return !(error instanceof UpstreamError) || error.reachedUpstream;
}

/** Internal failures are never shown raw: the caller gets a 502 naming the request. */
function asCallerError(error: unknown): SluiceError {
  if (error instanceof SluiceError) return error;
  return new UpstreamError("The model's answer could not be completed.", { isRetryable: true, cause: error });
}

/** Chat completions: prepare, call the backend, relay the answer, and account for it on every path. */
export class ChatService {
  constructor(
    private readonly models: ModelRegistry,
    private readonly ledger: Ledger,
  ) {}

  async create(request: ChatRequest, context: RequestContext): Promise<ChatResult> {
    const entry = this.models.callable(context.caller.plan, request.model);
    const prepared = await prepareRequest(request, entry);
    const identity: ResponseIdentity = {
      id: `chatcmpl-${context.requestId.slice(4)}`,
      created: Math.floor(Date.now() / 1000),
      model: prepared.modelId,
    };
    return prepared.stream ? this.stream(prepared, identity, context) : this.whole(prepared, identity, context);
  }

  private async whole(prepared: PreparedRequest, identity: ResponseIdentity, context: RequestContext): Promise<ChatResult> {
    const startedAt = Date.now();
    const meter = new UsageMeter();
    try {
      const completion = await prepared.entry.backend.complete({ model: prepared.entry.config, body: prepared.upstreamBody, signal: context.signal });
      meter.observeCompletion(completion);
      const usage = await this.settle(prepared, context, meter, startedAt, "completed", null);
      return { kind: "whole", body: completionBody(identity, completion, usage) };
    } catch (error) {
      if (reachedUpstream(error)) {
        const { outcome, errorCode } = outcomeOf(error);
        await this.settle(prepared, context, meter, startedAt, outcome, errorCode);
      }
      throw asCallerError(error);
    }
  }

  /** Waits for the upstream's first event, so that a failure before it is still an HTTP error, then relays. */
  private async stream(prepared: PreparedRequest, identity: ResponseIdentity, context: RequestContext): Promise<ChatResult> {
    const startedAt = Date.now();
    const meter = new UsageMeter();
    const events = prepared.entry.backend.stream({ model: prepared.entry.config, body: prepared.upstreamBody, signal: context.signal });
    let first: IteratorResult<CompletionEvent>;
    try {
      first = await events.next();
    } catch (error) {
      if (reachedUpstream(error)) {
        const { outcome, errorCode } = outcomeOf(error);
        await this.settle(prepared, context, meter, startedAt, outcome, errorCode);
      }
      throw asCallerError(error);
    }
    return { kind: "stream", chunks: this.relay(prepared, identity, context, events, first, meter, startedAt) };
  }

  private async *relay(
    prepared: PreparedRequest,
    identity: ResponseIdentity,
    context: RequestContext,
    events: AsyncGenerator<CompletionEvent>,
    first: IteratorResult<CompletionEvent>,
    meter: UsageMeter,
    startedAt: number,
  ): AsyncGenerator<unknown> {
    let settled = false;
    try {
      yield roleChunk(identity);
      for (let result = first; !result.done; result = await events.next()) {
        const event = result.value;
        meter.observe(event);
        if (event.type !== "usage") yield eventChunk(identity, event);
      }
      settled = true;
      const usage = await this.settle(prepared, context, meter, startedAt, "completed", null);
      if (prepared.includeUsage) yield usageChunk(identity, usage);
    } catch (error) {
      if (!settled) {
        settled = true;
        const { outcome, errorCode } = outcomeOf(error);
        await this.settle(prepared, context, meter, startedAt, outcome, errorCode);
      }
      if (!(error instanceof ClientGoneError)) yield asCallerError(error).toBody();
    } finally {
      // Reached without settling only when the consumer stopped early (the client left between chunks).
      if (!settled) await this.settle(prepared, context, meter, startedAt, "client_disconnected", null);
      await events.return(undefined);
    }
  }

  /** Writes the request's ledger row (waiting for its commit) and returns the usage billed. */
  private async settle(
    prepared: PreparedRequest,
    context: RequestContext,
    meter: UsageMeter,
    startedAt: number,
    outcome: Outcome,
    errorCode: string | null,
  ): Promise<Usage> {
    const { usage, source } = await meter.usage(prepared.messages, prepared.promptTokens);
    await this.ledger.record({
      requestId: context.requestId,
      organizationId: context.caller.organizationId,
      keyId: context.caller.keyId,
      model: prepared.modelId,
      promptTokens: usage.promptTokens,
      completionTokens: usage.completionTokens,
      reasoningTokens: usage.reasoningTokens,
      outcome,
      errorCode,
      usageSource: source,
      startedAt,
      endedAt: Date.now(),
    });
    return usage;
  }
}
