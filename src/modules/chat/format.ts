import type { SluiceError } from "../../errors";
import type { Completion, CompletionEvent, ToolCallDelta, Usage } from "../../upstream/types";

/** Fields every answer of one request shares, whatever API it is given in. */
export interface ResponseIdentity {
  /** The request's id (`req_…`); each API derives its answer's id from it. */
  requestId: string;
  /** Seconds since the epoch. */
  created: number;
  /** The model as the caller named it. */
  model: string;
}

/** What a stream's encoder is told at its start. */
export interface StreamStart {
  /** Chat only: whether the caller asked for the usage chunk (`stream_options.include_usage`). */
  includeUsage: boolean;
  /** The prompt's tokens as admission estimated them: for APIs that announce usage before the answer. */
  promptTokens: number;
}

/** A chat tool call, whole or as a streamed delta, read field by field: a delta may carry any part of it. */
export interface ToolCallParts {
  /** Its place among the answer's calls: the delta's `index`, or its position in a whole answer. */
  index: number;
  id: string | undefined;
  name: string;
  arguments: string;
}

function objectOf(value: unknown): Record<string, unknown> {
  return typeof value === "object" && value !== null ? (value as Record<string, unknown>) : {};
}

/**
 * The parts of a chat tool call or delta; `position` stands in for a missing `index` (a whole answer's order). A call
 * of one of OpenAI's custom tools (`custom: {name, input}`) is read as a function whose arguments are its input.
 */
export function toolCallParts(call: ToolCallDelta, position: number): ToolCallParts {
  const custom = call.type === "custom" ? objectOf(call.custom) : undefined;
  const fields = objectOf(call.function);
  const name = custom ? custom.name : fields.name;
  const argumentsPart = custom ? custom.input : fields.arguments;
  return {
    // A place among the calls: a whole number (the id of an Anthropic tool_use block is built from it).
    index: Number.isSafeInteger(call.index) && (call.index as number) >= 0 ? (call.index as number) : position,
    id: typeof call.id === "string" && call.id !== "" ? call.id : undefined,
    name: typeof name === "string" ? name : "",
    arguments: typeof argumentsPart === "string" ? argumentsPart : "",
  };
}

/** One streamed event of the answer, usage aside (usage ends the stream, see `end`). */
export type AnswerEvent = Exclude<CompletionEvent, { type: "usage" }>;

/**
 * Writes one stream's server-sent events in one API's dialect. Each method appends SSE text to `out`: a frame may
 * be several consecutive pieces (the response writes them one after the other), but what one call appends ends on
 * a frame boundary, so a batch of upstream events leaves in one flush.
 */
export interface StreamEncoder {
  /** The frames sent before the first upstream event. */
  start(out: string[]): void;
  event(event: AnswerEvent, out: string[]): void;
  /** The frames of an answer that ended (completed, cut at its limit, or refused), with what it was billed. */
  end(usage: Usage, out: string[]): void;
  /** The frames of an answer that failed after its first event. */
  fail(error: SluiceError, out: string[]): void;
}

/**
 * An API's way of giving an answer: the chat completions path produces one Completion or a stream of events, and a
 * format turns them into Chat Completions, Responses or Anthropic Messages bodies. Admission, queueing, the relay
 * and the ledger never depend on the format.
 */
export interface AnswerFormat {
  /** A whole answer's body, as JSON text. */
  whole(identity: ResponseIdentity, completion: Completion, usage: Usage): string;
  stream(identity: ResponseIdentity, start: StreamStart): StreamEncoder;
  /** A frame sent while the upstream is silent, for APIs whose clients expect one. */
  heartbeat?: string;
}
