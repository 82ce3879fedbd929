import type { CompletionEvent, Embeddings, ToolCallDelta, Usage } from "./types";

type JsonObject = Record<string, unknown>;

function isObject(value: unknown): value is JsonObject {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

function text(value: unknown): string | undefined {
  return typeof value === "string" && value.length > 0 ? value : undefined;
}

/**
 * The reasoning text of a message or delta. DeepSeek and older vLLM send `reasoning_content`; vLLM now sends
 * `reasoning`; Mistral's reasoning models send `thinking` parts in `content` (see contentOf); Sluice always answers
 * with `reasoning_content`.
 */
export function reasoningOf(message: JsonObject): string | undefined {
  const named = text(message.reasoning_content) ?? text(message.reasoning);
  if (!Array.isArray(message.content)) return named;
  const thinking = partsText(message.content, "thinking");
  return named === undefined ? thinking : thinking === undefined ? named : named + thinking;
}

/** The text of a string or a text part (`{type: "text", text}`). */
function textOfPart(value: unknown): string {
  if (typeof value === "string") return value;
  return isObject(value) && value.type === "text" && typeof value.text === "string" ? value.text : "";
}

/** The texts of a thinking part's `thinking`: a list of text parts (or strings), or one. A list within it is no text. */
function textOfParts(value: unknown): string {
  if (!Array.isArray(value)) return textOfPart(value);
  let joined = "";
  for (const part of value) joined += textOfPart(part);
  return joined;
}

/**
 * What the parts of a content list hold of one kind: the `text` parts' texts, or the `thinking` parts' (whose
 * `thinking` is a list of text parts). Mistral's reasoning models (Magistral; Mistral Small with a reasoning effort)
 * answer so, in whole answers and in stream deltas; undefined when no part of that kind has text.
 */
function partsText(parts: unknown[], kind: "text" | "thinking"): string | undefined {
  let joined = "";
  for (const part of parts) {
    if (!isObject(part)) continue;
    if (kind === "text" && part.type === "text" && typeof part.text === "string") joined += part.text;
    else if (kind === "thinking" && part.type === "thinking") joined += textOfParts(part.thinking);
  }
  return joined.length > 0 ? joined : undefined;
}

/** The refusal of a message or delta: OpenAI's models give it apart from the content, under Structured Outputs. */
export function refusalOf(message: JsonObject): string | undefined {
  return text(message.refusal);
}

/** The answer text of a message or delta: a string, or the text parts of a content list (see partsText). */
export function contentOf(message: JsonObject): string | undefined {
  const content = message.content;
  if (typeof content === "string") return content.length > 0 ? content : undefined;
  return Array.isArray(content) ? partsText(content, "text") : undefined;
}

/**
 * The most tokens one count of an answer may carry: no model's answer comes near it, and sums of such counts stay
 * exact in the ledger's 64-bit aggregates (SQLite's sum() fails past 2^63 rather than round, and a failing move would
 * hold every row behind it).
 */
const maxTokenCount = 2 ** 31 - 1;

/** A token count as the ledger and the quotas can hold it: a whole number from 0 to `maxTokenCount`. */
function isCount(value: unknown): value is number {
  return Number.isInteger(value) && (value as number) >= 0 && (value as number) <= maxTokenCount;
}

/**
 * An embeddings answer (`{data: [{index, embedding}], usage: {prompt_tokens}}`) read field by field: each item's vector
 * (numbers, or base64 text) put at its `index`; undefined when it is not one answer to `inputs` inputs.
 */
export function embeddingsOf(parsed: unknown, inputs: number): Embeddings | undefined {
  const data = (parsed as { data?: unknown } | null)?.data;
  if (!Array.isArray(data) || data.length !== inputs) return undefined;
  const vectors: (number[] | string)[] = new Array(inputs);
  for (const item of data) {
    const { index, embedding } = (item ?? {}) as { index?: unknown; embedding?: unknown };
    if (!Number.isInteger(index) || (index as number) < 0 || (index as number) >= inputs || vectors[index as number] !== undefined) return undefined;
    const isVector = typeof embedding === "string" || (Array.isArray(embedding) && embedding.every((value) => typeof value === "number"));
    if (!isVector) return undefined;
    vectors[index as number] = embedding as number[] | string;
  }
  const promptTokens = (parsed as { usage?: { prompt_tokens?: unknown } }).usage?.prompt_tokens;
  return { vectors, promptTokens: isCount(promptTokens) ? promptTokens : undefined };
}

/**
 * OpenAI usage into Sluice's Usage; undefined when the upstream sent none or nonsense, so that the answer is counted
 * with the tokenizer instead. Counts are billed and charged to quotas as they come: a negative one would give tokens
 * back, and one past a double (1e400 parses to Infinity) would use up the organization's quota for good.
 */
export function usageOf(value: unknown): Usage | undefined {
  if (!isObject(value)) return undefined;
  const promptTokens = value.prompt_tokens;
  const completionTokens = value.completion_tokens;
  if (!isCount(promptTokens) || !isCount(completionTokens)) return undefined;
  const details = isObject(value.completion_tokens_details) ? value.completion_tokens_details : {};
  // Reasoning is part of the completion's count (OpenAI's definition), never more than it.
  const reasoningTokens = isCount(details.reasoning_tokens) ? Math.min(details.reasoning_tokens, completionTokens) : 0;
  // Cached tokens are part of the prompt's count, never more than it.
  const promptDetails = isObject(value.prompt_tokens_details) ? value.prompt_tokens_details : {};
  const cachedTokens = isCount(promptDetails.cached_tokens) ? Math.min(promptDetails.cached_tokens, promptTokens) : 0;
  return { promptTokens, completionTokens, reasoningTokens, cachedTokens };
}

/** A call's `arguments` as OpenAI's format has them, JSON text; undefined when the call carries none. */
function argumentsText(value: unknown): string | undefined {
  if (typeof value === "string") return value;
  if (value === undefined || value === null) return undefined;
  // TGI's Messages API, and llama.cpp with --tool-args-object, send the arguments as a JSON object.
  return JSON.stringify(value);
}

/**
 * One tool call in OpenAI's chat shape, whatever shape the upstream wrote it in: a whole answer's call is `id` (when
 * the upstream sent one; the API that answers fills in its own otherwise), `type` and `function` with `name` and
 * `arguments` as text; a streamed delta carries its `index` (its place when the upstream sent none), and only the
 * parts it has. An empty `id` and a null `name` (as TGI streams them) are parts it does not have.
 */
function toolCallOf(call: JsonObject, position: number, whole: boolean): ToolCallDelta {
  // Another kind of tool (OpenAI's custom tools): its shape is not read here, and goes on as it came.
  if (typeof call.type === "string" && call.type !== "function") return call;
  const fields = isObject(call.function) ? call.function : {};
  const id = typeof call.id === "string" && call.id !== "" ? call.id : undefined;
  const name = typeof fields.name === "string" ? fields.name : undefined;
  const argumentsPart = argumentsText(fields.arguments);
  if (whole) return { ...(id === undefined ? {} : { id }), type: "function", function: { name: name ?? "", arguments: argumentsPart ?? "{}" } };
  const delta: ToolCallDelta = { index: Number.isSafeInteger(call.index) && (call.index as number) >= 0 ? call.index : position };
  if (id !== undefined) delta.id = id;
  if (id !== undefined || name !== undefined) delta.type = "function";
  const functionPart: JsonObject = {};
  if (name !== undefined) functionPart.name = name;
  if (argumentsPart !== undefined) functionPart.arguments = argumentsPart;
  delta.function = functionPart;
  return delta;
}

/**
 * The tool calls of a whole message or a streamed delta, in OpenAI's shape (see toolCallOf); undefined when there are
 * none, so that `[null]` is no call rather than a broken one. A lone call not in a list (TGI streams them so) is a
 * list of one.
 */
export function toolCallsOf(value: unknown, whole: boolean): ToolCallDelta[] | undefined {
  const list = Array.isArray(value) ? value : isObject(value) ? [value] : undefined;
  if (list === undefined) return undefined;
  const calls: ToolCallDelta[] = [];
  for (const call of list) if (isObject(call)) calls.push(toolCallOf(call, calls.length, whole));
  return calls.length > 0 ? calls : undefined;
}

/**
 * Numbers a stream's tool calls as OpenAI does, 0, 1, 2… in the order they open, whatever the upstream's indices.
 * Ollama gives every call of an answer index 0 (each call whole, with an id of its own), which clients merge into one
 * call: names run together ("write_filewrite_file"), arguments too. A delta with an id other than the one of the call
 * open at its index opens a new call; a delta without an id continues the call opened last at its index.
 */
export class ToolCallNumbering {
  /** The upstream's index → the number given to the call opened there last, and that call's id. */
  private readonly open = new Map<number, { number: number; id: string | undefined }>();
  private opened = 0;

  renumber(calls: ToolCallDelta[]): void {
    for (const call of calls) {
      // Another kind of tool's call without a number: passed on as it came.
      if (typeof call.index !== "number") continue;
      const id = typeof call.id === "string" ? call.id : undefined;
      let open = this.open.get(call.index);
      if (open === undefined || (id !== undefined && open.id !== undefined && id !== open.id)) {
        open = { number: this.opened++, id };
        this.open.set(call.index, open);
      } else if (open.id === undefined) open.id = id;
      call.index = open.number;
    }
  }
}

/** The finish reasons of OpenAI's chat format, which clients with typed responses parse as an enum. */
const openAIFinishReasons = new Set(["stop", "length", "tool_calls", "content_filter", "function_call"]);

/**
 * An upstream's finish reason as OpenAI names it. Other servers have their own: TGI ends with `eos_token` or
 * `stop_sequence`, vLLM an aborted request with `abort`; a client that parses the reason as OpenAI's enum (the Rust
 * and Go SDKs, say) fails on them. A cut by the limit (`max_tokens`) is `length`; any other is `stop`.
 */
export function finishReasonOf(reason: string): string {
  if (openAIFinishReasons.has(reason)) return reason;
  return reason === "max_tokens" ? "length" : "stop";
}

/**
 * Appends the events one upstream `chat.completion.chunk` carries to `events` (a read's batch, so that a chunk
 * makes no array of its own). Throws on a chunk that is not an object, before appending anything.
 */
export function eventsOfChunk(chunk: unknown, events: CompletionEvent[]): void {
  if (!isObject(chunk)) throw new TypeError("chunk is not a JSON object");
  const choice = Array.isArray(chunk.choices) && isObject(chunk.choices[0]) ? chunk.choices[0] : undefined;
  if (choice) {
    // A text completion's chunk (POST /completions) carries its text where a chat chunk carries its delta.
    const delta = isObject(choice.delta) ? choice.delta : typeof choice.text === "string" ? { content: choice.text } : {};
    const content = contentOf(delta);
    const reasoning = reasoningOf(delta);
    const toolCalls = toolCallsOf(delta.tool_calls, false);
    const refusal = refusalOf(delta);
    if (content !== undefined || reasoning !== undefined || toolCalls !== undefined) {
      events.push(refusal === undefined ? { type: "delta", content, reasoning, toolCalls } : { type: "delta", content, reasoning, toolCalls, refusal });
    } else if (refusal !== undefined) events.push({ type: "delta", refusal });
    if (typeof choice.finish_reason === "string") {
      events.push(
        typeof choice.stop_reason === "string"
          ? { type: "finish", reason: finishReasonOf(choice.finish_reason), stopSequence: choice.stop_reason }
          : { type: "finish", reason: finishReasonOf(choice.finish_reason) },
      );
    }
  }
  const usage = usageOf(chunk.usage);
  if (usage) events.push({ type: "usage", usage });
}
