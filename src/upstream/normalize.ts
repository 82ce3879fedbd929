import type { CompletionEvent, ToolCallDelta, Usage } from "./types";

type JsonObject = Record<string, unknown>;

function isObject(value: unknown): value is JsonObject {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

function text(value: unknown): string | undefined {
  return typeof value === "string" && value.length > 0 ? value : undefined;
}

/**
 * The reasoning text of a message or delta. DeepSeek and older vLLM send `reasoning_content`; vLLM now sends
 * `reasoning`; Sluice always answers with `reasoning_content`.
 */
export function reasoningOf(message: JsonObject): string | undefined {
  return text(message.reasoning_content) ?? text(message.reasoning);
}

/** OpenAI usage into Sluice's Usage; undefined when the upstream sent none or nonsense. */
export function usageOf(value: unknown): Usage | undefined {
  if (!isObject(value)) return undefined;
  const promptTokens = value.prompt_tokens;
  const completionTokens = value.completion_tokens;
  if (typeof promptTokens !== "number" || typeof completionTokens !== "number") return undefined;
  const details = isObject(value.completion_tokens_details) ? value.completion_tokens_details : {};
  const reasoningTokens = typeof details.reasoning_tokens === "number" ? details.reasoning_tokens : 0;
  return { promptTokens, completionTokens, reasoningTokens };
}

/**
 * Appends the events one upstream `chat.completion.chunk` carries to `events` (a read's batch, so that a chunk
 * makes no array of its own). Throws on a chunk that is not an object, before appending anything.
 */
export function eventsOfChunk(chunk: unknown, events: CompletionEvent[]): void {
  if (!isObject(chunk)) throw new TypeError("chunk is not a JSON object");
  const choice = Array.isArray(chunk.choices) && isObject(chunk.choices[0]) ? chunk.choices[0] : undefined;
  if (choice) {
    const delta = isObject(choice.delta) ? choice.delta : {};
    const content = text(delta.content);
    const reasoning = reasoningOf(delta);
    const toolCalls = Array.isArray(delta.tool_calls) && delta.tool_calls.length > 0 ? (delta.tool_calls as ToolCallDelta[]) : undefined;
    if (content !== undefined || reasoning !== undefined || toolCalls !== undefined) {
      events.push({ type: "delta", content, reasoning, toolCalls });
    }
    if (typeof choice.finish_reason === "string") {
      events.push(
        typeof choice.stop_reason === "string"
          ? { type: "finish", reason: choice.finish_reason, stopSequence: choice.stop_reason }
          : { type: "finish", reason: choice.finish_reason },
      );
    }
  }
  const usage = usageOf(chunk.usage);
  if (usage) events.push({ type: "usage", usage });
}
