import type { SafetyRuleConfig } from "../../config/schema";
import { reachedUpstream, SluiceError, UpstreamError } from "../../errors";
import type { StreamedAnswer } from "../../http/sse-response";
import type { LedgerRow } from "../../ledger/ledger";
import { LedgerUnavailable } from "../../ledger/not-recorded";
import type { LedgerStore } from "../../storage/types";
import { countChatTokens, countTextTokens, estimateChatTokens } from "../../tokens/count";
import { AdmissionRejected, type Lease } from "../admission/store";
import { quotaTokens } from "../admission/quota-weight";
import { ServerShutdown } from "../../upstream/errors";
import type { Metrics } from "../observability/metrics";
import { deferRecord, noteBilled, noteQueueWait, noteServer, type RequestRecord } from "../observability/request-record";
import type { BackendRequest, Completion, CompletionEvent, EventStream, Usage } from "../../upstream/types";
import type { AdmissionStore } from "../admission/store";
import type { Caller } from "../auth/service";
import type { ModelAccess, ModelRegistry } from "../models/registry";
import { type Queue, type Slot, timedWait } from "../queue/model-queue";
import { refusalText } from "../safety/rules";
import type { SafetyService } from "../safety/service";
import { type MeasuredUsage, UsageMeter } from "./meter";
import type { ChatRequest } from "./model";
import { Permit } from "./permit";
import { isContextTooLong, prepareRequest, type PreparedRequest } from "./prepare";
import type { AnswerFormat, ResponseIdentity } from "./format";
import { FixedAnswer, StreamRelay } from "./relay";
import { asCallerError, completedEnding, type Ending, outcomeOf, type Run, type RunSettler } from "./run";
import { chatFormat } from "./response";

/**
 * What one request needs besides its body: who asks, its id, and its abort controller, which the route fires when
 * the client leaves and the service fires (with DeadlineExceeded) when the upstream runs past its time limit.
 */
export interface RequestContext {
  caller: Caller;
  requestId: string;
  abort: AbortController;
  /** Facts for the request's log line and metrics, filled in as they become known. */
  record?: RequestRecord;
  /**
   * Called with `record` once a stream has ended and been settled (a whole answer is finished by the HTTP layer). One
   * function for every request, not a closure per request.
   */
  finish?: (record: RequestRecord) => void;
}

/** `headers`: the lease's `x-ratelimit-*`, in an object of this answer's own, which the route adds its headers to. */
export type ChatResult =
  /** The answer's body in its format, as JSON text. */
  | { kind: "whole"; body: string; headers: Record<string, string> }
  /** The answer's SSE text in its format (see StreamEncoder), written as the upstream's reads arrive. */
  | { kind: "stream"; answer: StreamedAnswer; headers: Record<string, string> };

export interface ChatServiceDependencies {
  models: ModelRegistry;
  ledger: LedgerStore;
  admission: AdmissionStore;
  queues: ReadonlyMap<string, Queue>;
  /** Whether the ledger's database answers: no request is admitted that could not be recorded. */
  ledgerAvailable?: () => boolean;
  safety: SafetyService;
  clock: () => number;
  metrics?: Metrics;
}

/** Whether a failure says the model cannot take the request now, so that a fallback may (see ChatService's fallBack). */
function movesToFallback(error: unknown, signal: AbortSignal): boolean {
  if (signal.aborted) return false;
  if (error instanceof UpstreamError) return error.isRetryable;
  return error instanceof SluiceError && (error.code === "model_unavailable" || error.code === "server_overloaded");
}

/** The upstream call of a prepared request; the pool writes on it the server it went to (see noteServer). */
function backendCall(prepared: PreparedRequest, context: RequestContext, sent: number): BackendRequest {
  return {
    model: prepared.entry.config,
    body: prepared.upstreamBody,
    signal: context.abort.signal,
    requestId: context.requestId,
    sent,
    trace: context.record?.trace,
    affinity: prepared.affinity,
    server: undefined,
    textCompletion: prepared.textCompletion,
  };
}

/**
 * Chat completions: prepare, admit (quotas and concurrency), wait for a model slot, call the backend, relay the
 * answer, and settle on every path: the permit is released and the ledger row written exactly once.
 */
export class ChatService implements RunSettler {
  /** Requests holding a permit, so that a shutdown can end them cleanly. */
  private readonly active = new Set<AbortController>();

  constructor(private readonly deps: ChatServiceDependencies) {}

  clock(): number {
    return this.deps.clock();
  }

  /** Requests in flight upstream. */
  inFlight(): number {
    return this.active.size;
  }

  /** Ends every request still running: streams get a final error event, then [DONE]; each is settled. */
  abortAll(): void {
    for (const controller of this.active) controller.abort(new ServerShutdown("the server's drain time is over"));
  }

  /** Runs a chat request; its answer is written in `format` (Chat Completions unless an API translated onto it). */
  async create(request: ChatRequest, context: RequestContext, format: AnswerFormat = chatFormat): Promise<ChatResult> {
    const { models, admission, queues, clock } = this.deps;
    const caller = context.caller;
    const plan = caller.plan;
    const entry = models.callable(caller, request.model);
    let prepared: PreparedRequest;
    try {
      // Each step below answers at once when it can: awaiting a value that is not a promise still costs a turn.
      const preparing = prepareRequest(request, entry);
      prepared = preparing instanceof Promise ? await preparing : preparing;
    } catch (error) {
      prepared = await this.toLargerContext(request, caller, error);
    }
    const promptEstimate = prepared.promptTokens ?? estimateChatTokens(prepared.messages);
    if (this.deps.ledgerAvailable && !this.deps.ledgerAvailable()) throw new LedgerUnavailable();
    let lease: Lease;
    try {
      const admitted = admission.admit(
        {
          organizationId: context.caller.organizationId,
          plan,
          key: context.caller.keyLimits && { id: context.caller.keyId, limits: context.caller.keyLimits },
          modelId: prepared.modelId,
          promptTokens: promptEstimate,
          maxTokens: prepared.maxTokens,
          weight: prepared.entry.config.quotaWeight,
        },
        clock(),
      );
      lease = admitted instanceof Promise ? await admitted : admitted;
    } catch (error) {
      if (error instanceof AdmissionRejected) this.deps.metrics?.quotaRejections.inc({ kind: error.kind });
      throw error;
    }
    const identity: ResponseIdentity = { requestId: context.requestId, created: Math.floor(clock() / 1000), model: prepared.modelName };
    // A disabled model's fallback, or a context fallback, took the request before it was admitted.
    if (prepared.modelName !== request.model) this.noteFallback(context, models.idOf(request.model) ?? request.model, prepared.modelId);
    try {
      // The red-line check comes before the request takes a queue place or reaches the upstream.
      const checking = this.deps.safety.checkInput(prepared.messages, context.abort.signal);
      const rule = checking instanceof Promise ? await checking : checking;
      if (rule) return await this.refuse(prepared, context, format, identity, promptEstimate, lease, rule);
    } catch (error) {
      lease.settle(null, clock());
      throw error;
    }
    const permit = new Permit(lease, context.abort, this.active);
    const run: Run = { request, prepared, context, format, identity, promptEstimate, permit, meter: new UsageMeter(), startedAt: 0 };
    try {
      const acquiring = (queues.get(prepared.modelId) as Queue).acquire(context.caller.organizationId, context.abort.signal, plan.queueWeight);
      const slot = acquiring instanceof Promise ? await timedWait(acquiring, (waited) => noteQueueWait(context.record, waited)) : acquiring;
      permit.occupy(slot, prepared.entry.config.timeoutMs);
    } catch (error) {
      try {
        await this.fallBack(run, error);
      } catch (ending) {
        permit.release(null, clock());
        throw ending;
      }
    }
    run.startedAt = clock();
    // Returned, not awaited: an async function that awaits a call stays reachable from it, and the route's handler
    // stays reachable for as long as its stream lasts; an await here kept this function, its promise and its scope
    // alive for every open stream (bench/HISTORY.md, "Fewer cells an open stream").
    return prepared.stream ? this.stream(run) : this.whole(run);
  }

  /** Answers a request that breaks a red-line rule itself: a normal answer, never sent upstream. */
  private async refuse(
    prepared: PreparedRequest,
    context: RequestContext,
    format: AnswerFormat,
    identity: ResponseIdentity,
    promptEstimate: number,
    lease: Lease,
    rule: SafetyRuleConfig,
  ): Promise<ChatResult> {
    const text = refusalText(rule, "input");
    const [promptTokens, completionTokens] = await Promise.all([prepared.promptTokens ?? countChatTokens(prepared.messages), countTextTokens(text)]);
    const usage: Usage = { promptTokens, completionTokens, reasoningTokens: 0, cachedTokens: 0 };
    // Refused at once: it starts and ends in the same moment.
    await this.end(lease, prepared, context, usage, "tokenizer", { firstTokenMs: null }, { outcome: "content_filter", ruleId: rule.id });
    const completion = { content: text, reasoning: null, toolCalls: null, finishReason: "content_filter", usage };
    if (!prepared.stream) return { kind: "whole", body: format.whole(identity, completion, usage), headers: lease.headers };
    deferRecord(context.record);
    const encoder = format.stream(identity, { includeUsage: prepared.includeUsage, promptTokens: promptEstimate });
    const batch: string[] = [];
    encoder.start(batch);
    encoder.event({ type: "delta", content: text }, batch);
    encoder.event({ type: "finish", reason: "content_filter" }, batch);
    encoder.end(usage, batch);
    return { kind: "stream", answer: new FixedAnswer(batch, context), headers: lease.headers };
  }

  private async whole(run: Run): Promise<ChatResult> {
    const context = run.context;
    // Once settling has begun the request is settled, whatever follows: its permit released and its row written (or
    // refused, which withholds the answer). Settling it again would write a second row and count its tokens twice.
    let settling = false;
    try {
      let completion: Completion;
      let sent = 0;
      for (;;) {
        const prepared = run.prepared;
        const call = backendCall(prepared, context, sent);
        try {
          completion = await prepared.entry.backend.complete(call);
          noteServer(context.record, call.server);
          break;
        } catch (error) {
          noteServer(context.record, call.server);
          sent = call.sent;
          await this.fallBack(run, error);
        }
      }
      run.meter.observeCompletion(completion);
      const checking = this.deps.safety.checkOutput([completion.content ?? "", completion.reasoning ?? "", completion.refusal ?? ""], context.abort.signal);
      const rule = checking instanceof Promise ? await checking : checking;
      if (rule)
        completion = { content: refusalText(rule, "output"), reasoning: null, toolCalls: null, finishReason: "content_filter", usage: completion.usage };
      settling = true;
      await this.settle(run, rule ? { outcome: "content_filter", ruleId: rule.id } : completedEnding);
      return { kind: "whole", body: run.format.whole(run.identity, completion, run.billed as Usage), headers: run.permit.lease.headers };
    } catch (error) {
      if (!settling) await this.fail(run, error);
      throw asCallerError(error);
    }
  }

  /** Waits for the upstream's first event, so that a failure before it is still an HTTP error, then relays. */
  private async stream(run: Run): Promise<ChatResult> {
    const context = run.context;
    let events: EventStream;
    let first: IteratorResult<CompletionEvent[]>;
    try {
      let sent = 0;
      for (;;) {
        const prepared = run.prepared;
        const call = backendCall(prepared, context, sent);
        events = prepared.entry.backend.stream(call);
        try {
          first = await events.next();
          noteServer(context.record, call.server);
          break;
        } catch (error) {
          noteServer(context.record, call.server);
          sent = call.sent;
          await this.fallBack(run, error);
        }
      }
    } catch (error) {
      await this.fail(run, error);
      throw asCallerError(error);
    }
    run.request = undefined;
    run.tried = undefined;
    deferRecord(context.record);
    const encoder = run.format.stream(run.identity, { includeUsage: run.prepared.includeUsage, promptTokens: run.promptEstimate });
    const answer = new StreamRelay(this, run, encoder, events, first, this.deps.safety.outputMonitor());
    return { kind: "stream", answer, headers: run.permit.lease.headers };
  }

  /**
   * A request too long for its model (`error`), prepared for the first of the asked model's context fallbacks (also
   * when it is disabled and its fallback was too small: never a fallback's own) that it fits and the caller may use;
   * rethrows `error` when none does, or when the error is another.
   */
  private async toLargerContext(request: ChatRequest, caller: ModelAccess, error: unknown): Promise<PreparedRequest> {
    const asked = this.deps.models.named(request.model);
    if (!isContextTooLong(error) || asked === undefined) throw error;
    for (const larger of this.deps.models.fallbacksOf(caller, asked, asked.config.contextFallbacks)) {
      try {
        return await prepareRequest(request, larger);
      } catch {
        // Too long for this one too, or its output limit too small for the request's: the next.
      }
    }
    throw error;
  }

  /**
   * Moves a request whose model could not take it to another model, and resolves once that one holds a slot for it;
   * rethrows `error` when there is none to move to.
   * - To the next of the asked model's fallbacks when the model cannot take it now: it is disabled (see
   *   ModelRegistry.callable), its queue is full or its wait too long (503 server_overloaded), every server is out or
   *   refuses it (503 model_unavailable), or the call failed before the first byte of an answer in a way worth retrying
   *   (502 upstream_error: connection, 5xx, garbage). A request already on a context fallback tries the rest of those
   *   first.
   * - To the next of its context fallbacks when the upstream said the request is too long for the model (its own
   *   count of the prompt can be larger than Sluice's).
   * Never once the caller left, the server began its shutdown or the model's time limit passed (the request's signal
   * fired), nor for the caller's other mistakes (4xx), nor once anything was produced, nor to a model already tried. A
   * fallback that the request does not fit (its prompt or `max_tokens`) or whose queue is full is passed over. The
   * lease stays: the quotas admitted the request once.
   */
  private async fallBack(run: Run, error: unknown): Promise<void> {
    const signal = run.context.abort.signal;
    const request = run.request;
    const tooLong = isContextTooLong(error);
    if (request === undefined || signal.aborted || !(tooLong || movesToFallback(error, signal)) || run.meter.producedAnything()) throw error;
    // The lists of the model asked for, also when a disabled model's first fallback failed: never a fallback's own.
    const asked = this.deps.models.named(request.model);
    if (asked === undefined) throw error;
    const caller = run.context.caller;
    const larger = this.deps.models.fallbacksOf(caller, asked, asked.config.contextFallbacks);
    const onLarger = larger.includes(run.prepared.entry);
    const candidates = tooLong ? larger : onLarger ? [...larger, ...this.deps.models.fallbacksOf(caller, asked)] : this.deps.models.fallbacksOf(caller, asked);
    if (candidates.length === 0) throw error;
    run.tried ??= [run.prepared.entry];
    const tried = run.tried;
    run.permit.vacate();
    const organizationId = caller.organizationId;
    for (const entry of candidates) {
      if (tried.includes(entry)) continue;
      tried.push(entry);
      const queue = this.deps.queues.get(entry.config.id);
      if (!queue) continue;
      let prepared: PreparedRequest;
      try {
        prepared = await prepareRequest(request, entry);
      } catch {
        continue;
      }
      try {
        const acquiring = queue.acquire(organizationId, signal, caller.plan.queueWeight);
        const slot: Slot = acquiring instanceof Promise ? await timedWait(acquiring, (waited) => noteQueueWait(run.context.record, waited)) : acquiring;
        run.permit.occupy(slot, entry.config.timeoutMs);
      } catch (refused) {
        if (!movesToFallback(refused, signal)) throw refused;
        continue;
      }
      // Counted here, once: a request no fallback took is counted when it fails (see `fail`).
      this.countUpstreamError(run.prepared.modelId, error);
      this.noteFallback(run.context, run.prepared.modelId, entry.config.id);
      run.prepared = prepared;
      run.identity.model = prepared.modelName;
      return;
    }
    // The last model called failed as `error` says; a fallback's full queue is not what happened to the call.
    throw error;
  }

  /** Counts a request moved to a fallback, and puts the models in its log record. */
  private noteFallback(context: RequestContext, from: string, to: string): void {
    const record = context.record;
    if (record) {
      record.fallbackFrom ??= record.model;
      record.model = to;
    }
    this.deps.metrics?.fallbacks.inc({ model: from, fallback: to });
  }

  /** Counts an upstream failure the upstream had the request for (a refused connection is not counted). */
  private countUpstreamError(modelId: string, error: unknown): void {
    if (!reachedUpstream(error)) return;
    const { outcome, errorCode } = outcomeOf(error);
    if (outcome === "upstream_error") this.deps.metrics?.upstreamErrors.inc({ model: modelId, code: errorCode ?? "upstream_error" });
  }

  /**
   * Settles a request that failed: recorded if the upstream did work, released in every case. An upstream that
   * failed before producing anything bills nothing; a caller who left is billed for the prompt and what was made.
   */
  async fail(run: Run, error: unknown): Promise<void> {
    if (!reachedUpstream(error)) {
      run.permit.release(null, this.deps.clock());
      return;
    }
    const { outcome, errorCode } = outcomeOf(error);
    this.countUpstreamError(run.prepared.modelId, error);
    await this.settle(run, { outcome, errorCode, billNothing: outcome === "upstream_error" && !run.meter.producedAnything() });
  }

  /**
   * Releases the permit with the real usage, kept in `run.billed`, and writes the ledger row; resolves once it is
   * committed. Not async: the ledger's own promise is returned, since a layer of our own would cost every answer a
   * promise and a turn (bench/HISTORY.md, "Three async layers fewer").
   */
  settle(run: Run, ending: Ending): Promise<void> {
    let measuring: MeasuredUsage | Promise<MeasuredUsage>;
    try {
      measuring = ending.billNothing
        ? { usage: { promptTokens: 0, completionTokens: 0, reasoningTokens: 0, cachedTokens: 0 }, source: "tokenizer" }
        : run.meter.usage(run.prepared.messages, run.prepared.promptTokens);
    } catch (error) {
      run.permit.release(null, this.deps.clock());
      return Promise.reject(error);
    }
    // Only a count on the tokenizer's thread (an upstream that did not report usage) makes this wait.
    if (measuring instanceof Promise) {
      return measuring.then(
        (measured) => this.settleMeasured(run, ending, measured),
        (error: unknown) => {
          run.permit.release(null, this.deps.clock());
          throw error;
        },
      );
    }
    return this.settleMeasured(run, ending, measuring);
  }

  private settleMeasured(run: Run, ending: Ending, measured: MeasuredUsage): Promise<void> {
    run.billed = measured.usage;
    return this.end(
      run.permit,
      run.prepared,
      run.context,
      measured.usage,
      measured.source,
      { startedAt: run.startedAt, firstTokenMs: run.firstTokenMs ?? null },
      ending,
    );
  }

  /**
   * The last steps of every request that did work, in this order: its places are freed with what it used, it is
   * noted in its log record and the metrics, and its ledger row is written (resolving once committed).
   */
  private end(
    places: Permit | Lease,
    prepared: PreparedRequest,
    context: RequestContext,
    usage: Usage,
    source: LedgerRow["usageSource"],
    timing: { startedAt?: number; firstTokenMs: number | null },
    ending: Ending,
  ): Promise<void> {
    const endedAt = this.deps.clock();
    // The model that answered: a fallback counts at its own weight.
    const weight = prepared.entry.config.quotaWeight;
    if (places instanceof Permit) places.release(usage, endedAt, weight);
    else places.settle(usage, endedAt, weight);
    this.note(context, prepared.modelId, usage, ending);
    return this.deps.ledger.record({
      requestId: context.requestId,
      organizationId: context.caller.organizationId,
      keyId: context.caller.keyId,
      model: prepared.ledgerModel,
      promptTokens: usage.promptTokens,
      completionTokens: usage.completionTokens,
      reasoningTokens: usage.reasoningTokens,
      cachedTokens: usage.cachedTokens,
      quotaTokens: weight === 1 ? null : quotaTokens(usage.promptTokens + usage.completionTokens, weight),
      outcome: ending.outcome,
      errorCode: ending.errorCode ?? null,
      ruleId: ending.ruleId ?? null,
      usageSource: source,
      startedAt: timing.startedAt ?? endedAt,
      endedAt,
      firstTokenMs: timing.firstTokenMs,
    });
  }

  /** Puts what was billed into the request's record and the token and refusal metrics. */
  private note(context: RequestContext, modelId: string, usage: Usage, ending: Ending): void {
    noteBilled(context.record, ending, usage);
    const metrics = this.deps.metrics;
    if (!metrics) return;
    const tokens = metrics.tokensOf(modelId);
    tokens.prompt.inc(usage.promptTokens);
    tokens.completion.inc(usage.completionTokens);
    tokens.reasoning.inc(usage.reasoningTokens);
    tokens.cached.inc(usage.cachedTokens);
    if (ending.ruleId) metrics.refusals.inc({ rule: ending.ruleId });
  }
}
