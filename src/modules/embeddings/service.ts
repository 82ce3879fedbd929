import type { ModelConfig } from "../../config/schema";
import { ClientGoneError, reachedUpstream, SluiceError } from "../../errors";
import { LedgerUnavailable } from "../../ledger/not-recorded";
import type { LedgerStore } from "../../storage/types";
import { countTexts, estimateTextTokens } from "../../tokens/count";
import { ServerShutdown } from "../../upstream/errors";
import type { BackendRequest, Embeddings, Usage } from "../../upstream/types";
import { AdmissionRejected, type AdmissionStore, type Lease } from "../admission/store";
import { quotaTokens } from "../admission/quota-weight";
import type { Caller } from "../auth/service";
import { Permit } from "../chat/permit";
import { ledgerModelOf, upstreamNameOf } from "../chat/prepare";
import { completedEnding, type Ending, outcomeOf } from "../chat/run";
import type { ModelRegistry } from "../models/registry";
import type { Metrics } from "../observability/metrics";
import { noteBilled, noteQueueWait, noteServer, type RequestRecord } from "../observability/request-record";
import { type Queue, timedWait } from "../queue/model-queue";
import { type EmbeddingsRequest, textsOf, tokenIdsIn } from "./model";

export interface EmbeddingsDependencies {
  models: ModelRegistry;
  ledger: LedgerStore;
  admission: AdmissionStore;
  queues: ReadonlyMap<string, Queue>;
  /** Whether the ledger's database answers: no request is admitted that could not be recorded. */
  ledgerAvailable?: () => boolean;
  clock: () => number;
  metrics?: Metrics;
}

/** Who asks, the request's id, its controller (aborted when the caller leaves) and its log record. */
export interface EmbeddingsContext {
  caller: Caller;
  requestId: string;
  abort: AbortController;
  record?: RequestRecord;
}

/** The input's tokens as admission estimates them (as for chat): one a token id, a token per 4 bytes of text. */
function estimatedTokens(request: EmbeddingsRequest): number {
  let total = tokenIdsIn(request.input);
  for (const text of textsOf(request.input)) total += estimateTextTokens(text);
  return total;
}

/** The input's tokens, counted: the tokenizer for texts, one an id for token ids. */
async function countedTokens(request: EmbeddingsRequest): Promise<number> {
  let total = tokenIdsIn(request.input);
  for (const count of await countTexts(textsOf(request.input))) total += count;
  return total;
}

/** OpenAI's embeddings answer, with the model as the caller named it. */
function answerBody(request: EmbeddingsRequest, embeddings: Embeddings, promptTokens: number): string {
  const data = embeddings.vectors.map((embedding, index) => ({ object: "embedding", index, embedding }));
  return JSON.stringify({ object: "list", data, model: request.model, usage: { prompt_tokens: promptTokens, total_tokens: promptTokens } });
}

/**
 * Embeddings (`POST /v1/embeddings`) through the same keys, plans, quotas, concurrency caps, model queues, ledger and
 * metrics as chat: prompt tokens only. No fallback ever takes such a request: another model's vectors lie in another
 * space, so mixing them would corrupt the caller's index without a word. The red-line rules do not apply: nothing is
 * generated.
 */
export class EmbeddingsService {
  /** Requests holding a permit: a shutdown waits for them, then ends them. */
  private readonly active = new Set<AbortController>();

  constructor(private readonly deps: EmbeddingsDependencies) {}

  /** Requests in flight upstream. */
  inFlight(): number {
    return this.active.size;
  }

  /** Ends every request still running, as ChatService.abortAll does. */
  abortAll(): void {
    for (const controller of this.active) controller.abort(new ServerShutdown("the server's drain time is over"));
  }

  /** The answer's JSON text and its `x-ratelimit-*` headers. */
  async create(request: EmbeddingsRequest, context: EmbeddingsContext): Promise<{ body: string; headers: Record<string, string> }> {
    const { models, admission, queues, clock } = this.deps;
    const caller = context.caller;
    // Never a fallback's vectors (see the class).
    const entry = models.callable(caller, request.model, false);
    const embed = entry.backend.embed?.bind(entry.backend);
    if (!embed) throw new SluiceError("invalid_request", `The model '${request.model}' does not make embeddings.`, { param: "model" });
    if (this.deps.ledgerAvailable && !this.deps.ledgerAvailable()) throw new LedgerUnavailable();
    const model = entry.config;
    let lease: Lease;
    try {
      const admitted = admission.admit(
        {
          organizationId: caller.organizationId,
          plan: caller.plan,
          key: caller.keyLimits && { id: caller.keyId, limits: caller.keyLimits },
          modelId: model.id,
          promptTokens: estimatedTokens(request),
          maxTokens: 0,
          weight: model.quotaWeight,
        },
        clock(),
      );
      lease = admitted instanceof Promise ? await admitted : admitted;
    } catch (error) {
      if (error instanceof AdmissionRejected) this.deps.metrics?.quotaRejections.inc({ kind: error.kind });
      throw error;
    }
    const permit = new Permit(lease, context.abort, this.active);
    const startedAt = clock();
    try {
      const acquiring = (queues.get(model.id) as Queue).acquire(caller.organizationId, context.abort.signal, caller.plan.queueWeight);
      permit.occupy(acquiring instanceof Promise ? await timedWait(acquiring, (waited) => noteQueueWait(context.record, waited)) : acquiring, model.timeoutMs);
    } catch (error) {
      permit.release(null, clock());
      throw error;
    }
    const body: Record<string, unknown> = { model: upstreamNameOf(model, request.model), input: request.input };
    if (request.encoding_format !== undefined) body.encoding_format = request.encoding_format;
    if (request.dimensions !== undefined) body.dimensions = request.dimensions;
    if (request.user !== undefined) body.user = request.user;
    let embeddings: Embeddings;
    try {
      const call: BackendRequest = {
        model,
        body,
        signal: context.abort.signal,
        requestId: context.requestId,
        sent: 0,
        trace: context.record?.trace,
        server: undefined,
      };
      try {
        embeddings = await embed(call);
      } finally {
        noteServer(context.record, call.server);
      }
    } catch (error) {
      await this.fail(request, context, permit, model, startedAt, error);
      throw error;
    }
    // The upstream's count, or the tokenizer's; the estimate if the tokenizer cannot count (its thread failed).
    const promptTokens = embeddings.promptTokens ?? (await countedTokens(request).catch(() => estimatedTokens(request)));
    await this.end(request, context, permit, model, promptTokens, startedAt, {
      ending: completedEnding,
      source: embeddings.promptTokens === undefined ? "tokenizer" : "upstream",
    });
    return { body: answerBody(request, embeddings, promptTokens), headers: lease.headers };
  }

  /** A failed call: no row when the upstream never had it; otherwise its row, billing a caller who left for the input. */
  private async fail(request: EmbeddingsRequest, context: EmbeddingsContext, permit: Permit, model: ModelConfig, startedAt: number, error: unknown) {
    if (!reachedUpstream(error)) {
      permit.release(null, this.deps.clock());
      return;
    }
    const { outcome, errorCode } = outcomeOf(error);
    if (outcome === "upstream_error") this.deps.metrics?.upstreamErrors.inc({ model: model.id, code: errorCode ?? "upstream_error" });
    const promptTokens = error instanceof ClientGoneError ? await countedTokens(request).catch(() => estimatedTokens(request)) : 0;
    await this.end(request, context, permit, model, promptTokens, startedAt, { ending: { outcome, errorCode }, source: "tokenizer" });
  }

  /** Frees the request's places with what it used, notes it in its record and the metrics, and writes its ledger row. */
  private end(
    request: EmbeddingsRequest,
    context: EmbeddingsContext,
    permit: Permit,
    model: ModelConfig,
    promptTokens: number,
    startedAt: number,
    how: { ending: Ending; source: "upstream" | "tokenizer" },
  ): Promise<void> {
    const endedAt = this.deps.clock();
    const usage: Usage = { promptTokens, completionTokens: 0, reasoningTokens: 0, cachedTokens: 0 };
    permit.release(usage, endedAt, model.quotaWeight);
    noteBilled(context.record, how.ending, usage);
    this.deps.metrics?.tokensOf(model.id).prompt.inc(promptTokens);
    return this.deps.ledger.record({
      requestId: context.requestId,
      organizationId: context.caller.organizationId,
      keyId: context.caller.keyId,
      model: ledgerModelOf(model, request.model),
      promptTokens,
      completionTokens: 0,
      reasoningTokens: 0,
      cachedTokens: 0,
      quotaTokens: model.quotaWeight === 1 ? null : quotaTokens(promptTokens, model.quotaWeight),
      outcome: how.ending.outcome,
      errorCode: how.ending.errorCode ?? null,
      ruleId: null,
      usageSource: how.source,
      startedAt,
      endedAt,
      firstTokenMs: null,
    });
  }
}
