import { UpstreamError } from "../errors";
import { errorFromFailure, errorFromStatus } from "./errors";
import { eventsOfChunk, reasoningOf, usageOf } from "./normalize";
import { readServerSentEvents } from "./sse";
import type { Backend, BackendRequest, Completion, CompletionEvent, ToolCallDelta } from "./types";

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
    try {
      const response = await this.post(request);
      let parsed: unknown;
      try {
        parsed = await response.json();
      } catch (error) {
        throw new UpstreamError(`The upstream for model ${this.modelId} sent a body that is not JSON.`, { isRetryable: true, cause: error });
      }
      return this.completionOf(parsed);
    } catch (error) {
      // A whole answer reached the upstream once it was sent: its status line only comes with the answer.
      throw errorFromFailure(this.modelId, error, request.signal, true);
    }
  }

  async *stream(request: BackendRequest): AsyncGenerator<CompletionEvent> {
    let finished = false;
    let answered = false;
    try {
      const response = await this.post(request);
      answered = true;
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
      // A stream reached the upstream once its status line arrived. Returning early (the consumer stopped) ends the
      // body's iteration, which cancels the body and so the upstream request.
      throw errorFromFailure(this.modelId, error, request.signal, answered);
    }
  }

  private async post(request: BackendRequest): Promise<Response> {
    const response = await fetch(this.url, {
      method: "POST",
      headers: this.headers,
      body: JSON.stringify(request.body),
      signal: request.signal,
    });
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
