import { UpstreamError } from "../errors";
import { serverRootUrl, upstreamUrl } from "./endpoint";
import { clearDeadline, setDeadline } from "./deadlines";
import { asksForCompletionTokens, errorFromFailure, errorFromStatus } from "./errors";
import { contentOf, embeddingsOf, eventsOfChunk, finishReasonOf, reasoningOf, refusalOf, ToolCallNumbering, toolCallsOf, usageOf } from "./normalize";
import { maxEventLength, ServerSentEventDecoder } from "./sse";
import { readTextWithin } from "../http/read-body";
import type { Backend, BackendRequest, Completion, CompletionEvent, Embeddings, StreamEnding } from "./types";

/** How much of an upstream's error body is read for its reason; the rest is not waited for. */
const maxErrorBodyBytes = 64 * 1024;

/**
 * The signal of one upstream call with first-byte or idle limits: a signal of its own that also fires when the
 * upstream is silent too long (`arm` restarts the clock). Without those limits a call uses the request's own signal
 * and no object of this kind, which an open stream would keep for its whole life.
 */
class TimedSignal {
  private readonly controller = new AbortController();
  private readonly forward = () => this.controller.abort(this.request.signal.reason);
  private armedMs: number | undefined;

  constructor(private readonly request: BackendRequest) {
    if (request.signal.aborted) this.forward();
    else request.signal.addEventListener("abort", this.forward, { once: true });
  }

  get signal(): AbortSignal {
    return this.controller.signal;
  }

  arm(timeoutMs: number | undefined): void {
    if (this.armedMs !== undefined) clearDeadline(this.controller, this.armedMs);
    this.armedMs = timeoutMs;
    if (timeoutMs !== undefined) setDeadline(this.controller, timeoutMs);
  }

  done(): void {
    this.arm(undefined);
    this.request.signal.removeEventListener("abort", this.forward);
  }
}

function timedSignal(request: BackendRequest): TimedSignal | undefined {
  const model = request.model;
  return model.firstByteTimeoutMs === undefined && model.idleTimeoutMs === undefined ? undefined : new TimedSignal(request);
}

/** Tells whoever keeps the server's health (`onEnd`, the pool's breaker) and the request's trace how a call ended. */
function ended(request: BackendRequest, onEnd: ((ending: StreamEnding) => void) | undefined, ending: StreamEnding): void {
  onEnd?.(ending);
  request.trace?.callEnded(typeof ending === "object" ? ending.failure : undefined);
}

/** How many inputs an embeddings request's `input` holds: a text or a list of token ids is one. */
function inputCount(input: unknown): number {
  return Array.isArray(input) && input.length > 0 && typeof input[0] !== "number" ? input.length : 1;
}

/** A client for one OpenAI-compatible server (vLLM, SGLang, llama.cpp, Ollama, hosted APIs). */
export class OpenAIBackend implements Backend {
  private readonly url: string;
  private readonly embeddingsUrl: string;
  private readonly completionsUrl: string;
  private readonly healthUrl: string;
  private readonly headers: Record<string, string>;
  /**
   * Learned from the upstream's own refusal (see asksForCompletionTokens): it takes the output limit only as
   * `max_completion_tokens`, so a `max_tokens` is renamed before it is sent. The model's `max_tokens_field` says so
   * from the start.
   */
  private completionTokensOnly = false;

  /**
   * `access`: the key and the model's own headers (see accessHeaders). `healthCheckPath`: what `answers` asks for, from
   * the server's root; undefined: `…/models` under the base URL.
   */
  constructor(
    private readonly modelId: string,
    readonly baseUrl: string,
    access: Record<string, string> = {},
    healthCheckPath?: string,
  ) {
    this.url = upstreamUrl(baseUrl, "/chat/completions");
    this.embeddingsUrl = upstreamUrl(baseUrl, "/embeddings");
    this.completionsUrl = upstreamUrl(baseUrl, "/completions");
    this.healthUrl = healthCheckPath === undefined ? upstreamUrl(baseUrl, "/models") : serverRootUrl(baseUrl, healthCheckPath);
    // Uncompressed, and never decompressed here (see `send`): Bun's fetch asks for gzip, brotli and zstd by default
    // and inflates whatever comes, so 64 KB of an upstream's gzip became 64 MB in memory.
    this.headers = { ...access, "content-type": "application/json", accept: "application/json, text/event-stream", "accept-encoding": "identity" };
  }

  /** Whether the server answers `GET …/models` (or the model's health path) with a 200 within `timeoutMs`: a health check, not a call. */
  async answers(timeoutMs: number): Promise<boolean> {
    try {
      const response = await fetch(this.healthUrl, { headers: this.headers, signal: AbortSignal.timeout(timeoutMs), redirect: "manual", decompress: false });
      await response.body?.cancel().catch(() => undefined);
      return response.status === 200;
    } catch {
      return false;
    }
  }

  /** A whole answer. `onEnd`, when given, learns once how the call ended: the pool's circuit breaker passes one. */
  async complete(request: BackendRequest, onEnd?: (ending: StreamEnding) => void): Promise<Completion> {
    const timed = timedSignal(request);
    const signal = timed ? timed.signal : request.signal;
    timed?.arm(request.model.firstByteTimeoutMs);
    try {
      let response = await this.send(request, signal);
      if (response.status !== 200) response = await this.afterRefusal(response, request, signal);
      let parsed: unknown;
      try {
        // Read whole, not counted as it arrives (as an error's body and a stream's events are): reading the length
        // first cost every answer 1-2 % of its CPU (bench/switch.ts, bench/HISTORY.md), so the model's time limit is
        // what bounds it. Awaited here, not in a function of its own: each async layer costs a promise and a turn.
        parsed = await response.json();
      } catch (error) {
        throw this.notJson(error);
      }
      const completion = this.completionOf(parsed);
      ended(request, onEnd, "finished");
      return completion;
    } catch (error) {
      // A whole answer reached the upstream once it was sent: its status line only comes with the answer.
      const failure = errorFromFailure(this.modelId, error, signal, true);
      ended(request, onEnd, { failure });
      throw failure;
    } finally {
      timed?.done();
    }
  }

  /**
   * POST /embeddings with the request's body; each input's vector in input order. `onEnd`, when given, learns once how
   * the call ended, as for `complete`.
   */
  async embed(request: BackendRequest, onEnd?: (ending: StreamEnding) => void): Promise<Embeddings> {
    const timed = timedSignal(request);
    const signal = timed ? timed.signal : request.signal;
    timed?.arm(request.model.firstByteTimeoutMs);
    try {
      const response = await this.send(request, signal, this.embeddingsUrl);
      if (response.status !== 200) throw (await this.refusalOf(response, request)).error;
      let parsed: unknown;
      try {
        parsed = await response.json();
      } catch (error) {
        throw this.notJson(error);
      }
      const embeddings = embeddingsOf(parsed, inputCount(request.body.input));
      if (!embeddings) {
        const reported = (parsed as { error?: { message?: unknown } } | null)?.error?.message;
        const reason = typeof reported === "string" ? `failed: ${reported}` : "sent an answer that is not one vector for each input";
        throw new UpstreamError(`The upstream for model ${this.modelId} ${reason}.`, { isRetryable: true });
      }
      ended(request, onEnd, "finished");
      return embeddings;
    } catch (error) {
      const failure = errorFromFailure(this.modelId, error, signal, true);
      ended(request, onEnd, { failure });
      throw failure;
    } finally {
      timed?.done();
    }
  }

  /** The answer's events. `onEnd`, when given, learns once how the call ended: the pool's circuit breaker passes one. */
  async *stream(request: BackendRequest, onEnd?: (ending: StreamEnding) => void): AsyncGenerator<CompletionEvent[], void> {
    // Left as it is when the consumer stops the generator at a yield.
    let ending: StreamEnding = "stopped";
    let finished = false;
    let answered = false;
    const timed = timedSignal(request);
    const signal = timed ? timed.signal : request.signal;
    const idle = request.model.idleTimeoutMs;
    timed?.arm(request.model.firstByteTimeoutMs);
    try {
      let response = await this.send(request, signal);
      if (response.status !== 200) response = await this.afterRefusal(response, request, signal);
      answered = true;
      timed?.arm(idle);
      if (!response.body) throw new UpstreamError(`The upstream for model ${this.modelId} sent no body.`, { isRetryable: true });
      const decoder = new ServerSentEventDecoder();
      let numbering: ToolCallNumbering | undefined;
      // The body's reader itself, not its async iterator, which wraps every read in a promise of its own.
      const reader = response.body.getReader();
      let ended = false;
      try {
        for (;;) {
          const read = await reader.read();
          if (idle !== undefined) timed?.arm(idle);
          // Nothing of the read is used after the yield below, so this generator does not keep its bytes (and
          // with them the read) alive while it waits for the next one.
          const done = read.done;
          // At the end, the decoder gives what the last bytes completed.
          const batch = decoder.feed(done ? undefined : read.value);
          const events: CompletionEvent[] = [];
          let failure: UpstreamError | undefined;
          for (const data of batch) {
            if (data === "[DONE]") {
              if (events.length > 0) yield events;
              ending = "finished";
              return;
            }
            const before = events.length;
            failure = this.collect(data, events);
            if (failure) break;
            for (let index = before; index < events.length; index++) {
              const event = events[index] as CompletionEvent;
              if (event.type === "delta" && event.toolCalls) {
                // Made at a stream's first tool call: most streams have none.
                numbering ??= new ToolCallNumbering();
                numbering.renumber(event.toolCalls);
              }
            }
          }
          // The event texts are not kept past this read (the decoder's array would hold them while the next one waits).
          batch.length = 0;
          if (!finished) finished = events.some((event) => event.type === "finish");
          // What arrived before a failure in the same read is still relayed (and billed) before the failure.
          if (events.length > 0) yield events;
          if (failure) throw failure;
          if (decoder.overflowed) {
            throw new UpstreamError(`The upstream for model ${this.modelId} sent a stream event over ${maxEventLength} characters.`, { isRetryable: true });
          }
          if (done) {
            ended = true;
            break;
          }
        }
      } finally {
        // Leaving early (the consumer stopped, a failure) cancels the body, and so the upstream request.
        if (!ended) await reader.cancel().catch(() => undefined);
      }
      if (!finished) throw new UpstreamError(`The upstream stream for model ${this.modelId} ended before the answer did.`, { isRetryable: true });
      ending = "finished";
    } catch (error) {
      // A stream reached the upstream once its status line arrived.
      const failure = errorFromFailure(this.modelId, error, signal, answered);
      ending = { failure };
      throw failure;
    } finally {
      timed?.done();
      ended(request, onEnd, ending);
    }
  }

  private notJson(cause: unknown): UpstreamError {
    return new UpstreamError(`The upstream for model ${this.modelId} sent a body that is not JSON.`, { isRetryable: true, cause });
  }

  /** Adds one stream event's CompletionEvents to `events`; returns the failure it reports or is. */
  private collect(data: string, events: CompletionEvent[]): UpstreamError | undefined {
    let chunk: unknown;
    try {
      chunk = JSON.parse(data);
    } catch (error) {
      return new UpstreamError(`The upstream for model ${this.modelId} sent a malformed stream event.`, { isRetryable: true, cause: error });
    }
    const upstreamError = (chunk as { error?: { message?: string } }).error;
    if (upstreamError) {
      return new UpstreamError(`The upstream for model ${this.modelId} failed mid-stream: ${upstreamError.message ?? "unknown error"}`, { isRetryable: true });
    }
    try {
      eventsOfChunk(chunk, events);
    } catch (error) {
      return new UpstreamError(`The upstream for model ${this.modelId} sent a stream event that is not an object.`, { isRetryable: true, cause: error });
    }
    return undefined;
  }

  /**
   * Posts the request (to the chat route, or the text completions route for a text completion, unless `url` names
   * another); its caller checks the status (a layer of its own would cost every request an await). A
   * redirect is not followed: the prompt goes to the address the operator configured and nowhere else (fetch would
   * post it again to whatever a 307 names, and answer a 302 with what another server says). Nor is a compressed
   * answer inflated (see the constructor).
   */
  private send(request: BackendRequest, signal: AbortSignal, url = request.textCompletion ? this.completionsUrl : this.url): Promise<Response> {
    // The text completions route takes only max_tokens.
    if (this.completionTokensOnly && request.body.max_tokens !== undefined && !request.textCompletion) {
      request.body.max_completion_tokens = request.body.max_tokens;
      delete request.body.max_tokens;
    }
    const trace = request.trace;
    const sent = ++request.sent;
    const id = sent === 1 ? request.requestId : `${request.requestId}-${sent}`;
    const sending = fetch(url, {
      method: "POST",
      headers: trace === undefined ? { ...this.headers, "x-request-id": id } : { ...this.headers, "x-request-id": id, ...trace.callHeaders(request, url, id) },
      body: JSON.stringify(request.body),
      signal,
      redirect: "manual",
      // An upstream that compresses anyway sends bytes that are not JSON: a 502, not a body inflated without bound.
      decompress: false,
    });
    if (trace === undefined || !trace.recording) return sending;
    return sending.then((response) => {
      trace.callAnswered(response.status);
      return response;
    });
  }

  /**
   * What follows an answer whose status is not 200: its error, thrown, or, when the upstream refused `max_tokens` for
   * `max_completion_tokens` (nothing was generated), the answer to the same request sent once more with the limit
   * renamed, which this backend then does for every request. Every request sent with `max_tokens` before the first
   * such refusal came back gets it too, and is sent again the same way: the rename in `send` makes it once a request.
   */
  private async afterRefusal(response: Response, request: BackendRequest, signal: AbortSignal): Promise<Response> {
    const { error, body } = await this.refusalOf(response, request);
    if (request.body.max_tokens === undefined || request.textCompletion || !asksForCompletionTokens(response.status, body)) throw error;
    this.completionTokensOnly = true;
    const retried = await this.send(request, signal);
    if (retried.status !== 200) throw (await this.refusalOf(retried, request)).error;
    return retried;
  }

  /** The error of an answer whose status is not 200, from its body (its first `maxErrorBodyBytes`) and Retry-After. */
  private async refusalOf(response: Response, request: BackendRequest): Promise<{ error: UpstreamError; body: string }> {
    if (response.status >= 300 && response.status < 400) {
      await response.body?.cancel().catch(() => undefined);
      // The address it names stays out of the message, which the caller sees: it may be the operator's network.
      const error = new UpstreamError(
        `The upstream for model ${this.modelId} answered with a redirect (HTTP ${response.status}), which Sluice does not follow.`,
        {
          isRetryable: true,
          upstreamStatus: response.status,
        },
      );
      return { error, body: "" };
    }
    const body = (await readTextWithin(response.body, maxErrorBodyBytes).catch(() => "")) ?? "";
    const namedByCaller = request.model.prefix !== undefined;
    return { error: errorFromStatus(this.modelId, response.status, body, response.headers.get("retry-after"), namedByCaller), body };
  }

  private completionOf(parsed: unknown): Completion {
    const choice = (parsed as { choices?: unknown[] })?.choices?.[0] as
      | { message?: Record<string, unknown>; text?: unknown; finish_reason?: unknown; stop_reason?: unknown }
      | undefined;
    // A text completion (POST /completions) carries its text where a chat answer carries its message.
    if (choice && choice.message === undefined && typeof choice.text === "string") choice.message = { content: choice.text };
    if (!choice || typeof choice.message !== "object" || choice.message === null) {
      // Some servers report a failure in a 200's body: its reason is given on, as a stream's error event's is.
      const reported = (parsed as { error?: { message?: unknown } } | null)?.error?.message;
      if (typeof reported === "string") throw new UpstreamError(`The upstream for model ${this.modelId} failed: ${reported}`, { isRetryable: true });
      throw new UpstreamError(`The upstream for model ${this.modelId} sent an answer without choices.`, { isRetryable: true });
    }
    const message = choice.message;
    const toolCalls = toolCallsOf(message.tool_calls, true) ?? null;
    return {
      content: typeof message.content === "string" ? message.content : (contentOf(message) ?? null),
      reasoning: reasoningOf(message) ?? null,
      toolCalls,
      refusal: refusalOf(message),
      finishReason: typeof choice.finish_reason === "string" ? finishReasonOf(choice.finish_reason) : "stop",
      stopSequence: typeof choice.stop_reason === "string" ? choice.stop_reason : undefined,
      usage: usageOf((parsed as { usage?: unknown }).usage),
    };
  }
}
