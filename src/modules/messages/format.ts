import type { SluiceError } from "../../errors";
import { serverSentEvent } from "../../upstream/sse";
import { answerText, type Completion, type ToolCallDelta, type Usage } from "../../upstream/types";
import { toolCallParts, type AnswerEvent, type AnswerFormat, type ResponseIdentity, type StreamEncoder, type StreamStart } from "../chat/format";

type Json = Record<string, unknown>;

/** What the answer held, beyond its finish reason, that decides its stop reason. */
interface AnswerShape {
  /** The answer holds tool_use blocks. */
  calledTools: boolean;
  /** The model refused apart from its content (OpenAI's `refusal` field). */
  refused: boolean;
}

/**
 * Chat's finish reason as Anthropic's stop reason. An agent's loop runs the tools when it says `tool_use`, and some
 * servers end a call with `stop` rather than `tool_calls` (TGI does); a model's own refusal is Anthropic's `refusal`,
 * as a red-line refusal is.
 */
function stopReasonOf(finishReason: string | undefined, stopSequence: string | undefined, shape: AnswerShape): string {
  switch (finishReason) {
    case "length":
      return "max_tokens";
    case "tool_calls":
      return "tool_use";
    case "content_filter":
      return "refusal";
    default:
      if (shape.refused) return "refusal";
      if (stopSequence !== undefined) return "stop_sequence";
      return shape.calledTools ? "tool_use" : "end_turn";
  }
}

/**
 * Anthropic's usage: its `input_tokens` are the prompt's tokens not read from the cache, which it counts apart
 * (`cache_read_input_tokens`), where OpenAI's `prompt_tokens` include them. Sluice writes no cache of its own, so
 * `cache_creation_input_tokens` is 0.
 */
function usageBody(usage: Pick<Usage, "promptTokens" | "completionTokens" | "cachedTokens">): Json {
  return {
    input_tokens: usage.promptTokens - usage.cachedTokens,
    output_tokens: usage.completionTokens,
    cache_creation_input_tokens: 0,
    cache_read_input_tokens: usage.cachedTokens,
  };
}

function messageId(identity: ResponseIdentity): string {
  return `msg_${identity.requestId.slice(4)}`;
}

/** A tool call's arguments as Anthropic's `input` object; text that is not a JSON object is kept under `arguments`. */
function inputOf(argumentsText: string): Json {
  if (argumentsText.trim() === "") return {};
  try {
    const parsed: unknown = JSON.parse(argumentsText);
    if (typeof parsed === "object" && parsed !== null && !Array.isArray(parsed)) return parsed as Json;
  } catch {
    // not JSON: kept as text below
  }
  return { arguments: argumentsText };
}

function toolUseId(identity: ResponseIdentity, index: number, id: string | undefined): string {
  return id ?? `toolu_${identity.requestId.slice(4)}_${index}`;
}

/** The Anthropic `message` object of a whole answer. */
function wholeMessage(identity: ResponseIdentity, completion: Completion, usage: Usage): Json {
  const content: Json[] = [];
  if (completion.reasoning) content.push({ type: "thinking", thinking: completion.reasoning, signature: "" });
  const text = answerText(completion.content, completion.refusal);
  if (text) content.push({ type: "text", text });
  for (const call of (completion.toolCalls ?? []).map(toolCallParts)) {
    content.push({ type: "tool_use", id: toolUseId(identity, call.index, call.id), name: call.name, input: inputOf(call.arguments) });
  }
  if (content.length === 0) content.push({ type: "text", text: "" });
  const stopReason = stopReasonOf(completion.finishReason, completion.stopSequence, {
    calledTools: content.some((block) => block.type === "tool_use"),
    refused: Boolean(completion.refusal),
  });
  return {
    id: messageId(identity),
    type: "message",
    role: "assistant",
    model: identity.model,
    content,
    stop_reason: stopReason,
    stop_sequence: stopReason === "stop_sequence" ? (completion.stopSequence ?? null) : null,
    usage: usageBody(usage),
  };
}

/** A content block still being written. */
interface OpenBlock {
  kind: "thinking" | "text" | "tool_use";
  index: number;
  stopped?: boolean;
}

/** Anthropic's keep-alive event. */
const pingEvent = serverSentEvent("ping", '{"type":"ping"}');

/**
 * Writes a Messages stream: `message_start` (with the prompt's estimated tokens; the exact count comes in
 * `message_delta`), then each content block started, filled by deltas and stopped, then `message_delta` with the
 * stop reason and usage, then `message_stop`. Thinking and text deltas extend the open block of their kind; another
 * kind stops it and starts the next.
 */
class MessagesStreamEncoder implements StreamEncoder {
  private blocks = 0;
  private current: OpenBlock | undefined;
  private readonly calls = new Map<number, OpenBlock>();
  private finishReason: string | undefined;
  private stopSequence: string | undefined;
  private refused = false;

  constructor(
    private readonly identity: ResponseIdentity,
    private readonly opening: StreamStart,
  ) {}

  start(out: string[]): void {
    const message = {
      id: messageId(this.identity),
      type: "message",
      role: "assistant",
      model: this.identity.model,
      content: [],
      stop_reason: null,
      stop_sequence: null,
      usage: usageBody({ promptTokens: this.opening.promptTokens, completionTokens: 0, cachedTokens: 0 }),
    };
    this.emit(out, "message_start", { message });
    out.push(pingEvent);
  }

  event(event: AnswerEvent, out: string[]): void {
    if (event.type === "finish") {
      this.finishReason = event.reason;
      this.stopSequence = event.stopSequence;
      return;
    }
    if (event.reasoning) this.extend("thinking", { type: "thinking_delta", thinking: event.reasoning }, out);
    const text = answerText(event.content, event.refusal);
    if (text) this.extend("text", { type: "text_delta", text }, out);
    if (event.refusal) this.refused = true;
    if (event.toolCalls) for (const call of event.toolCalls) this.extendCall(call, out);
  }

  end(usage: Usage, out: string[]): void {
    this.stopAll(out);
    const stopReason = stopReasonOf(this.finishReason, this.stopSequence, { calledTools: this.calls.size > 0, refused: this.refused });
    const delta = { stop_reason: stopReason, stop_sequence: stopReason === "stop_sequence" ? (this.stopSequence ?? null) : null };
    this.emit(out, "message_delta", { delta, usage: usageBody(usage) });
    this.emit(out, "message_stop", {});
  }

  /** Anthropic's stream `error` event; the SDK raises it as an APIError. */
  fail(error: SluiceError, out: string[]): void {
    out.push(serverSentEvent("error", JSON.stringify(error.toAnthropicBody())));
  }

  private emit(out: string[], type: string, fields: Json): void {
    out.push(serverSentEvent(type, JSON.stringify({ type, ...fields })));
  }

  private extend(kind: "thinking" | "text", delta: Json, out: string[]): void {
    if (this.current?.kind !== kind) {
      this.stopCurrent(out);
      this.current = { kind, index: this.blocks++ };
      const block = kind === "thinking" ? { type: "thinking", thinking: "", signature: "" } : { type: "text", text: "" };
      this.emit(out, "content_block_start", { index: this.current.index, content_block: block });
    }
    this.emit(out, "content_block_delta", { index: this.current.index, delta });
  }

  private extendCall(call: ToolCallDelta, out: string[]): void {
    const parts = toolCallParts(call, 0);
    let block = this.calls.get(parts.index);
    if (!block) {
      // Calls arrive one after another: the next one's start stops those before it, as Anthropic's blocks stop in order.
      this.stopCurrent(out);
      this.stopCalls(out);
      block = { kind: "tool_use", index: this.blocks++ };
      this.calls.set(parts.index, block);
      const content_block = { type: "tool_use", id: toolUseId(this.identity, parts.index, parts.id), name: parts.name, input: {} };
      this.emit(out, "content_block_start", { index: block.index, content_block });
    }
    if (parts.arguments) this.emit(out, "content_block_delta", { index: block.index, delta: { type: "input_json_delta", partial_json: parts.arguments } });
  }

  private stopCurrent(out: string[]): void {
    if (!this.current) return;
    this.emit(out, "content_block_stop", { index: this.current.index });
    this.current = undefined;
  }

  private stopAll(out: string[]): void {
    this.stopCurrent(out);
    this.stopCalls(out);
  }

  private stopCalls(out: string[]): void {
    for (const block of this.calls.values()) {
      if (block.stopped) continue;
      block.stopped = true;
      this.emit(out, "content_block_stop", { index: block.index });
    }
  }
}

/** The Anthropic Messages API's answers. */
export const messagesFormat: AnswerFormat = {
  whole: (identity, completion, usage) => JSON.stringify(wholeMessage(identity, completion, usage)),
  stream: (identity, start) => new MessagesStreamEncoder(identity, start),
  heartbeat: pingEvent,
};
