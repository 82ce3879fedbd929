import { UpstreamError } from "../errors";
import { errorFromFailure, errorFromStatus } from "./errors";
import { eventsOfChunk, reasoningOf, usageOf } from "./normalize";
import { readServerSentEvents } from "./sse";
import type { Backend, BackendRequest, Completion, CompletionEvent, ToolCallDelta } from "./types";

interface Call {
  signal: AbortSignal;
  timedOut(): boolean;
  /** Set once the upstream's status line arrived (for a stream, that is when it accepted the request). */
  answered: boolean;
  finish(): void;
}

/** One abort signal for the call: the client's, plus the model's timeout. */
function startCall(request: BackendRequest): Call {
  const controller = new AbortController();
  let timedOut = false;
  const timer = setTimeout(() => {
    timedOut = true;
    controller.abort(new DOMException("upstream timeout", "TimeoutError"));
  }, request.model.timeoutMs);
  const onClientAbort = () => controller.abort(request.signal.reason);
  if (request.signal.aborted) onClientAbort();
  else request.signal.addEventListener("abort", onClientAbort, { once: true });
  return {
    signal: controller.signal,
    timedOut: () => timedOut,
    answered: false,
    finish() {
      clearTimeout(timer);
      request.signal.removeEventListener("abort", onClientAbort);
      if (!controller.signal.aborted) controller.abort();
    },
  };
}

/** A client for any OpenAI-compatible server (vLLM, SGLang, llama.cpp, Ollama, hosted APIs). */
export class OpenAIBackend implements Backend {
  private readonly url: string;
  private readonly headers: Record<string, string>;

  constructor(private readonly modelId: string, baseUrl: string, apiKey: string | undefined) {
    this.url = `${baseUrl}/chat/completions`;
    this.headers = { "content-type": "application/json", accept: "application/json, text/event-stream" };
    if (apiKey) this.headers.authorization = `Bearer ${apiKey}`;
  }

  async complete(request: BackendRequest): Promise<Completion> {
    const call = startCall(request);
    try {
      const response = await this.post(request, call);
      let parsed: unknown;
      try {
        parsed = await response.json();
      } catch (error) {
        throw new UpstreamError(`The upstream for model ${this.modelId} sent a body that is not JSON.`, { isRetryable: true, cause: error });
      }
      return this.completionOf(parsed);
    } catch (error) {
      throw errorFromFailure(this.modelId, error, request.signal, call.timedOut(), request.model.timeoutMs, true);
    } finally {
      call.finish();
    }
  }

  async *stream(request: BackendRequest): AsyncGenerator<CompletionEvent> {
    const call = startCall(request);
    let finished = false;
    try {
      const response = await this.post(request, call);
      if (!response.body) throw new UpstreamError(`The upstream for model ${this.modelId} sent no body.`, { isRetryable: true });
      for await (const data of readServerSentEvents(response.body)) {
        if (data === "[DONE]") return;
        let chunk: unknown;
        try {
          chunk = JSON.parse(data);
        } catch (error) {
          throw new UpstreamError(`The upstream for model ${this.modelId} sent a malformed stream event.`, { isRetryable: true, cause: error });
        }
        const upstreamError = (chunk as { error?: { message?: string } }).error;
        if (upstreamError) {
          throw new UpstreamError(`The upstream for model ${this.modelId} failed mid-stream: ${upstreamError.message ?? "unknown error"}`, {
            isRetryable: true,
          });
        }
        for (const event of eventsOfChunk(chunk)) {
          if (event.type === "finish") finished = true;
          yield event;
        }
      }
      if (!finished) throw new UpstreamError(`The upstream stream for model ${this.modelId} ended before the answer did.`, { isRetryable: true });
    } catch (error) {
      throw errorFromFailure(this.modelId, error, request.signal, call.timedOut(), request.model.timeoutMs, call.answered);
    } finally {
      call.finish();
    }
  }

  private async post(request: BackendRequest, call: Call): Promise<Response> {
    const response = await fetch(this.url, {
      method: "POST",
      headers: this.headers,
      body: JSON.stringify(request.body),
      signal: call.signal,
    });
    call.answered = true;
    if (response.status !== 200) {
      const body = await response.text().catch(() => "");
      throw errorFromStatus(this.modelId, response.status, body, response.headers.get("retry-after"));
    }
    return response;
  }

  private completionOf(parsed: unknown): Completion {
    const choice = (parsed as { choices?: unknown[] })?.choices?.[0] as { message?: Record<string, unknown>; finish_reason?: unknown } | undefined;
    if (!choice || typeof choice.message !== "object" || choice.message === null) {
      throw new UpstreamError(`The upstream for model ${this.modelId} sent an answer without choices.`, { isRetryable: true });
    }
    const message = choice.message;
    const toolCalls = Array.isArray(message.tool_calls) && message.tool_calls.length > 0 ? (message.tool_calls as ToolCallDelta[]) : null;
    return {
      content: typeof message.content === "string" ? message.content : null,
      reasoning: reasoningOf(message) ?? null,
      toolCalls,
      finishReason: typeof choice.finish_reason === "string" ? choice.finish_reason : "stop",
      usage: usageOf((parsed as { usage?: unknown }).usage),
    };
  }
}
