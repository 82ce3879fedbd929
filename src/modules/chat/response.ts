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

function chunk(identity: ResponseIdentity, delta: Record<string, unknown>, finishReason: string | null) {
  return {
    id: identity.id,
    object: "chat.completion.chunk" as const,
    created: identity.created,
    model: identity.model,
    choices: [{ index: 0, delta, logprobs: null, finish_reason: finishReason }],
    usage: null,
  };
}

/** The first chunk, which carries the role. */
export function roleChunk(identity: ResponseIdentity) {
  return chunk(identity, { role: "assistant", content: "" }, null);
}

/** The chunk for one delta or finish event. */
export function eventChunk(identity: ResponseIdentity, event: Exclude<CompletionEvent, { type: "usage" }>) {
  if (event.type === "finish") return chunk(identity, {}, event.reason);
  const delta: Record<string, unknown> = {};
  if (event.reasoning !== undefined) delta.reasoning_content = event.reasoning;
  if (event.content !== undefined) delta.content = event.content;
  if (event.toolCalls !== undefined) delta.tool_calls = event.toolCalls;
  return chunk(identity, delta, null);
}

/** The extra chunk sent when `stream_options.include_usage` is true: no choices, only usage. */
export function usageChunk(identity: ResponseIdentity, usage: Usage) {
  return {
    id: identity.id,
    object: "chat.completion.chunk" as const,
    created: identity.created,
    model: identity.model,
    choices: [],
    usage: usageBody(usage),
  };
}
