import type { SluiceError } from "../../errors";
import { serverSentEvent } from "../../upstream/sse";
import type { Completion, ToolCallDelta, Usage } from "../../upstream/types";
import { toolCallParts, type AnswerEvent, type AnswerFormat, type ResponseIdentity, type StreamEncoder } from "../chat/format";
import { splitToolName, type ResponsesRequest } from "./model";

type Json = Record<string, unknown>;

/** The request's settings as a response object repeats them. */
function echoOf(request: ResponsesRequest): Json {
  return {
    instructions: request.instructions ?? null,
    max_output_tokens: request.max_output_tokens ?? null,
    parallel_tool_calls: request.parallel_tool_calls ?? true,
    previous_response_id: null,
    reasoning: { effort: request.reasoning?.effort ?? null, summary: null },
    store: request.store ?? true,
    temperature: request.temperature ?? 1,
    text: { format: request.text?.format ?? { type: "text" } },
    tool_choice: request.tool_choice ?? "auto",
    tools: request.tools ?? [],
    top_p: request.top_p ?? 1,
    truncation: "disabled",
    user: request.user ?? null,
    metadata: request.metadata ?? {},
  };
}

function usageBody(usage: Usage): Json {
  return {
    input_tokens: usage.promptTokens,
    input_tokens_details: { cached_tokens: usage.cachedTokens },
    output_tokens: usage.completionTokens,
    output_tokens_details: { reasoning_tokens: usage.reasoningTokens },
    total_tokens: usage.promptTokens + usage.completionTokens,
  };
}

/** `completed`, or `incomplete` with its reason: the output limit, or a red-line refusal. */
function statusOf(finishReason: string | undefined): { status: string; incomplete_details: Json | null } {
  if (finishReason === "length") return { status: "incomplete", incomplete_details: { reason: "max_output_tokens" } };
  if (finishReason === "content_filter") return { status: "incomplete", incomplete_details: { reason: "content_filter" } };
  return { status: "completed", incomplete_details: null };
}

/** Ids of a response and its items, derived from the request id. */
class Ids {
  readonly suffix: string;
  constructor(identity: ResponseIdentity) {
    this.suffix = identity.requestId.slice(4);
  }
  response = () => `resp_${this.suffix}`;
  reasoning = () => `rs_${this.suffix}`;
  message = (index: number) => `msg_${this.suffix}${index === 0 ? "" : `_${index}`}`;
  call = (index: number) => `fc_${this.suffix}_${index}`;
}

function reasoningItem(id: string, text: string): Json {
  return { type: "reasoning", id, summary: [], content: [{ type: "reasoning_text", text }] };
}

function textPart(text: string): Json {
  return { type: "output_text", text, annotations: [], logprobs: [] };
}

/** A model's refusal (OpenAI's `refusal`, given apart from the content) as the message's own content part. */
function refusalPart(refusal: string): Json {
  return { type: "refusal", refusal };
}

/** The kinds of a message's content parts. */
type PartKind = "output_text" | "refusal";

function partOf(kind: PartKind, text: string): Json {
  return kind === "output_text" ? textPart(text) : refusalPart(text);
}

function messageItem(id: string, status: string, content: Json[]): Json {
  return { type: "message", id, status, role: "assistant", content };
}

/** The request's tool namespaces: a call of `namespace__name` is given back as `name` in `namespace`. */
type Namespaces = ReadonlySet<string>;

function namespacesOf(request: ResponsesRequest): Namespaces {
  return new Set((request.tools ?? []).filter((tool) => tool.type === "namespace").map((tool) => String((tool as { name?: unknown }).name)));
}

function functionCallItem(id: string, callId: string, chatName: string, argumentsText: string, status: string, namespaces: Namespaces): Json {
  const { name, namespace } = splitToolName(chatName, namespaces);
  return { type: "function_call", id, call_id: callId, name, ...(namespace ? { namespace } : {}), arguments: argumentsText, status };
}

/** The OpenAI `response` object of a whole answer. */
function wholeResponse(identity: ResponseIdentity, echo: Json, namespaces: Namespaces, completion: Completion, usage: Usage): Json {
  const ids = new Ids(identity);
  const { status, incomplete_details } = statusOf(completion.finishReason);
  const output: Json[] = [];
  if (completion.reasoning) output.push(reasoningItem(ids.reasoning(), completion.reasoning));
  const calls = (completion.toolCalls ?? []).map(toolCallParts);
  const refused = completion.refusal !== undefined;
  if (completion.content || refused || calls.length === 0) {
    const content: Json[] = [];
    if (completion.content || !refused) content.push(textPart(completion.content ?? ""));
    if (refused) content.push(refusalPart(completion.refusal as string));
    output.push(messageItem(ids.message(0), status === "completed" ? "completed" : "incomplete", content));
  }
  for (const [index, call] of calls.entries()) {
    output.push(functionCallItem(ids.call(index), call.id ?? `call_${ids.suffix}_${index}`, call.name, call.arguments, "completed", namespaces));
  }
  return {
    id: ids.response(),
    object: "response",
    created_at: identity.created,
    status,
    background: false,
    error: null,
    incomplete_details,
    model: identity.model,
    output,
    usage: usageBody(usage),
    ...echo,
  };
}

/** An item of the stream still being written: its place in `output`, and what it holds so far. */
interface OpenItem {
  kind: "reasoning" | "message" | "function_call";
  outputIndex: number;
  id: string;
  /** What the open part (a message's) or the item (reasoning, a call's arguments) holds so far. */
  text: string;
  callId?: string;
  name?: string;
  closed?: boolean;
  /** A message's parts already closed, and the kind of the open one: text, then a refusal, as OpenAI gives them. */
  parts?: Json[];
  partKind?: PartKind;
}

/**
 * Writes a Responses stream: `response.created` and `response.in_progress`, then each output item (reasoning, the
 * message, function calls) opened, filled by deltas and closed, then `response.completed` or
 * `response.incomplete` with the usage; every event numbered. Chat deltas of one kind extend the open item; a
 * delta of another kind closes it and opens the next.
 */
class ResponsesStreamEncoder implements StreamEncoder {
  private sequence = 0;
  private readonly ids: Ids;
  private readonly output: Json[] = [];
  /** The open reasoning or message item. */
  private current: OpenItem | undefined;
  /** Open function calls by their chat tool-call index: chat may interleave their argument deltas. */
  private readonly calls = new Map<number, OpenItem>();
  private messages = 0;
  private finishReason: string | undefined;

  constructor(
    private readonly identity: ResponseIdentity,
    private readonly echo: Json,
    private readonly namespaces: Namespaces,
  ) {
    this.ids = new Ids(identity);
  }

  start(out: string[]): void {
    const response = this.snapshot("in_progress", null, null);
    this.emit(out, "response.created", { response });
    this.emit(out, "response.in_progress", { response });
  }

  event(event: AnswerEvent, out: string[]): void {
    if (event.type === "finish") {
      this.finishReason = event.reason;
      return;
    }
    if (event.reasoning) this.extend("reasoning", event.reasoning, out);
    if (event.content) this.extend("output_text", event.content, out);
    if (event.refusal) this.extend("refusal", event.refusal, out);
    if (event.toolCalls) for (const call of event.toolCalls) this.extendCall(call, out);
  }

  end(usage: Usage, out: string[]): void {
    this.closeAll(out);
    const { status, incomplete_details } = statusOf(this.finishReason);
    const response = { ...this.snapshot(status, incomplete_details, usageBody(usage)), output: this.output };
    this.emit(out, status === "completed" ? "response.completed" : "response.incomplete", { response });
  }

  /** OpenAI's stream `error` event; the official SDKs raise it as an APIError. */
  fail(error: SluiceError, out: string[]): void {
    this.emit(out, "error", { code: error.code, message: error.message, param: error.param });
  }

  private snapshot(status: string, incompleteDetails: Json | null, usage: Json | null): Json {
    return {
      id: this.ids.response(),
      object: "response",
      created_at: this.identity.created,
      status,
      background: false,
      error: null,
      incomplete_details: incompleteDetails,
      model: this.identity.model,
      output: [],
      usage,
      ...this.echo,
    };
  }

  private emit(out: string[], type: string, fields: Json): void {
    out.push(serverSentEvent(type, JSON.stringify({ type, sequence_number: this.sequence++, ...fields })));
  }

  /** Extends the open reasoning item, or the open message's part of this kind; another kind closes it first. */
  private extend(kind: "reasoning" | PartKind, delta: string, out: string[]): void {
    const itemKind = kind === "reasoning" ? "reasoning" : "message";
    if (this.current?.kind !== itemKind) {
      this.closeCurrent(out);
      this.current = this.open(itemKind, out);
    }
    const item = this.current as OpenItem;
    if (kind !== "reasoning" && item.partKind !== kind) this.openPart(item, kind, out);
    item.text += delta;
    const place = { item_id: item.id, output_index: item.outputIndex, content_index: item.parts?.length ?? 0 };
    if (kind === "reasoning") this.emit(out, "response.reasoning_text.delta", { ...place, delta });
    else if (kind === "output_text") this.emit(out, "response.output_text.delta", { ...place, delta, logprobs: [] });
    else this.emit(out, "response.refusal.delta", { ...place, delta });
  }

  private open(kind: "reasoning" | "message", out: string[]): OpenItem {
    const outputIndex = this.output.length;
    if (kind === "message") {
      const id = this.ids.message(this.messages++);
      const added = messageItem(id, "in_progress", []);
      this.output.push(added);
      this.emit(out, "response.output_item.added", { output_index: outputIndex, item: added });
      return { kind, outputIndex, id, text: "", parts: [] };
    }
    const id = `${this.ids.reasoning()}${outputIndex === 0 ? "" : `_${outputIndex}`}`;
    const added = { type: "reasoning", id, summary: [], content: [] };
    this.output.push(added);
    this.emit(out, "response.output_item.added", { output_index: outputIndex, item: added });
    this.emit(out, "response.content_part.added", { item_id: id, output_index: outputIndex, content_index: 0, part: { type: "reasoning_text", text: "" } });
    return { kind, outputIndex, id, text: "" };
  }

  /** Closes the message's open part, if any, and opens one of this kind after it. */
  private openPart(item: OpenItem, kind: PartKind, out: string[]): void {
    this.closePart(item, out);
    item.partKind = kind;
    item.text = "";
    const place = { item_id: item.id, output_index: item.outputIndex, content_index: item.parts?.length ?? 0 };
    this.emit(out, "response.content_part.added", { ...place, part: partOf(kind, "") });
  }

  private closePart(item: OpenItem, out: string[]): void {
    const kind = item.partKind;
    const parts = item.parts as Json[];
    if (!kind) return;
    item.partKind = undefined;
    const place = { item_id: item.id, output_index: item.outputIndex, content_index: parts.length };
    if (kind === "output_text") this.emit(out, "response.output_text.done", { ...place, text: item.text, logprobs: [] });
    else this.emit(out, "response.refusal.done", { ...place, refusal: item.text });
    const part = partOf(kind, item.text);
    this.emit(out, "response.content_part.done", { ...place, part });
    parts.push(part);
  }

  private extendCall(call: ToolCallDelta, out: string[]): void {
    const parts = toolCallParts(call, 0);
    let item = this.calls.get(parts.index);
    if (!item) {
      // Calls arrive one after another: the next one's start closes those before it, as OpenAI's items close in order.
      this.closeCurrent(out);
      this.closeCalls(out);
      const outputIndex = this.output.length;
      const id = this.ids.call(this.calls.size);
      const callId = parts.id ?? `call_${this.ids.suffix}_${parts.index}`;
      item = { kind: "function_call", outputIndex, id, text: "", callId, name: parts.name };
      this.calls.set(parts.index, item);
      const added = functionCallItem(id, callId, item.name ?? "", "", "in_progress", this.namespaces);
      this.output.push(added);
      this.emit(out, "response.output_item.added", { output_index: outputIndex, item: added });
    }
    if (parts.arguments) {
      item.text += parts.arguments;
      this.emit(out, "response.function_call_arguments.delta", { item_id: item.id, output_index: item.outputIndex, delta: parts.arguments });
    }
  }

  private closeCurrent(out: string[]): void {
    const item = this.current;
    if (!item) return;
    this.current = undefined;
    let done: Json;
    if (item.kind === "reasoning") {
      const place = { item_id: item.id, output_index: item.outputIndex, content_index: 0 };
      this.emit(out, "response.reasoning_text.done", { ...place, text: item.text });
      this.emit(out, "response.content_part.done", { ...place, part: { type: "reasoning_text", text: item.text } });
      done = reasoningItem(item.id, item.text);
    } else {
      this.closePart(item, out);
      // Closed by the end of an answer cut short, the message is as incomplete as the response.
      done = messageItem(item.id, statusOf(this.finishReason).status === "completed" ? "completed" : "incomplete", item.parts as Json[]);
    }
    this.output[item.outputIndex] = done;
    this.emit(out, "response.output_item.done", { output_index: item.outputIndex, item: done });
  }

  private closeAll(out: string[]): void {
    this.closeCurrent(out);
    this.closeCalls(out);
  }

  private closeCalls(out: string[]): void {
    for (const item of this.calls.values()) {
      if (item.closed) continue;
      item.closed = true;
      this.emit(out, "response.function_call_arguments.done", { item_id: item.id, output_index: item.outputIndex, name: item.name, arguments: item.text });
      const done = functionCallItem(item.id, item.callId as string, item.name as string, item.text, "completed", this.namespaces);
      this.output[item.outputIndex] = done;
      this.emit(out, "response.output_item.done", { output_index: item.outputIndex, item: done });
    }
  }
}

/** The Responses API's answers for one request (they repeat its settings). */
export function responsesFormat(request: ResponsesRequest): AnswerFormat {
  const echo = echoOf(request);
  const namespaces = namespacesOf(request);
  return {
    whole: (identity, completion, usage) => JSON.stringify(wholeResponse(identity, echo, namespaces, completion, usage)),
    stream: (identity) => new ResponsesStreamEncoder(identity, echo, namespaces),
  };
}
