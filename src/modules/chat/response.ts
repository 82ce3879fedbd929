import type { SluiceError } from "../../errors";
import { doneEvent, serverSentData } from "../../upstream/sse";
import type { Completion, Usage } from "../../upstream/types";
import type { AnswerEvent, AnswerFormat, ResponseIdentity, StreamEncoder, StreamStart } from "./format";

function usageBody(usage: Usage) {
  return {
    prompt_tokens: usage.promptTokens,
    completion_tokens: usage.completionTokens,
    total_tokens: usage.promptTokens + usage.completionTokens,
    completion_tokens_details: { reasoning_tokens: usage.reasoningTokens },
  };
}

function completionId(identity: ResponseIdentity): string {
  return `chatcmpl-${identity.requestId.slice(4)}`;
}

/** The OpenAI `chat.completion` object. */
export function completionBody(identity: ResponseIdentity, completion: Completion, usage: Usage) {
  const message: Record<string, unknown> = {
    role: "assistant",
    content: completion.content,
    reasoning_content: completion.reasoning,
    refusal: null,
  };
  if (completion.toolCalls) message.tool_calls = completion.toolCalls;
  return {
    id: completionId(identity),
    object: "chat.completion" as const,
    created: identity.created,
    model: identity.model,
    choices: [{ index: 0, message, logprobs: null, finish_reason: completion.finishReason }],
    usage: usageBody(usage),
  };
}

/**
 * Writes the `chat.completion.chunk` events of one stream. The parts every chunk shares are serialized once per
 * stream; a chunk costs one small JSON.stringify of its delta (thousands of streams send hundreds of chunks each).
 */
export class ChunkEncoder implements StreamEncoder {
  private readonly head: string;
  private readonly includeUsage: boolean;

  constructor(identity: ResponseIdentity, start: StreamStart) {
    this.head = `{"id":${JSON.stringify(completionId(identity))},"object":"chat.completion.chunk","created":${identity.created},"model":${JSON.stringify(identity.model)},"choices":`;
    this.includeUsage = start.includeUsage;
  }

  /** The first chunk, which carries the role. */
  start(out: string[]): void {
    out.push(serverSentData(`${this.head}[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}],"usage":null}`));
  }

  event(event: AnswerEvent, out: string[]): void {
    if (event.type === "finish") {
      out.push(serverSentData(`${this.head}[{"index":0,"delta":{},"logprobs":null,"finish_reason":${JSON.stringify(event.reason)}}],"usage":null}`));
      return;
    }
    let delta = "";
    if (event.reasoning !== undefined) delta += `"reasoning_content":${JSON.stringify(event.reasoning)}`;
    if (event.content !== undefined) delta += `${delta ? "," : ""}"content":${JSON.stringify(event.content)}`;
    if (event.toolCalls !== undefined) delta += `${delta ? "," : ""}"tool_calls":${JSON.stringify(event.toolCalls)}`;
    out.push(serverSentData(`${this.head}[{"index":0,"delta":{${delta}},"logprobs":null,"finish_reason":null}],"usage":null}`));
  }

  /** The usage chunk (no choices) when `stream_options.include_usage` is true, then `[DONE]`. */
  end(usage: Usage, out: string[]): void {
    if (this.includeUsage) out.push(serverSentData(`${this.head}[],"usage":${JSON.stringify(usageBody(usage))}}`));
    out.push(doneEvent);
  }

  /** The OpenAI error object as the last event, then `[DONE]`, as OpenAI ends a stream that failed. */
  fail(error: SluiceError, out: string[]): void {
    out.push(serverSentData(JSON.stringify(error.toBody())), doneEvent);
  }
}

/** Chat Completions, the API every other one is translated onto. */
export const chatFormat: AnswerFormat = {
  whole: completionBody,
  stream: (identity, start) => new ChunkEncoder(identity, start),
};
