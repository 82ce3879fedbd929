import type { Completion, CompletionEvent, Usage } from "../../upstream/types";

/** Fields every response of one request shares. */
export interface ResponseIdentity {
  id: string;
  created: number;
  model: string;
}

function usageBody(usage: Usage) {
  return {
    prompt_tokens: usage.promptTokens,
    completion_tokens: usage.completionTokens,
    total_tokens: usage.promptTokens + usage.completionTokens,
    completion_tokens_details: { reasoning_tokens: usage.reasoningTokens },
  };
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
    id: identity.id,
    object: "chat.completion" as const,
    created: identity.created,
    model: identity.model,
    choices: [{ index: 0, message, logprobs: null, finish_reason: completion.finishReason }],
    usage: usageBody(usage),
  };
}

/**
 * Writes the `chat.completion.chunk` JSON of one stream. The parts every chunk shares are serialized once per
 * stream; a chunk costs one small JSON.stringify of its delta (thousands of streams send hundreds of chunks each).
 */
export class ChunkEncoder {
  private readonly head: string;

  constructor(identity: ResponseIdentity) {
    this.head = `{"id":${JSON.stringify(identity.id)},"object":"chat.completion.chunk","created":${identity.created},"model":${JSON.stringify(identity.model)},"choices":`;
  }

  /** The first chunk, which carries the role. */
  role(): string {
    return `${this.head}[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}],"usage":null}`;
  }

  /** The chunk for one delta or finish event. */
  event(event: Exclude<CompletionEvent, { type: "usage" }>): string {
    if (event.type === "finish") return `${this.head}[{"index":0,"delta":{},"logprobs":null,"finish_reason":${JSON.stringify(event.reason)}}],"usage":null}`;
    let delta = "";
    if (event.reasoning !== undefined) delta += `"reasoning_content":${JSON.stringify(event.reasoning)}`;
    if (event.content !== undefined) delta += `${delta ? "," : ""}"content":${JSON.stringify(event.content)}`;
    if (event.toolCalls !== undefined) delta += `${delta ? "," : ""}"tool_calls":${JSON.stringify(event.toolCalls)}`;
    return `${this.head}[{"index":0,"delta":{${delta}},"logprobs":null,"finish_reason":null}],"usage":null}`;
  }

  /** The extra chunk sent when `stream_options.include_usage` is true: no choices, only usage. */
  usage(usage: Usage): string {
    return `${this.head}[],"usage":${JSON.stringify(usageBody(usage))}}`;
  }
}
