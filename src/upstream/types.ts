import type { ModelConfig } from "../config/schema";
import type { ServerHealth } from "./server-health";
import type { TraceContext } from "../tracing/trace-context";

/** Token usage as OpenAI reports it, reasoning included in completion tokens and cached tokens in prompt tokens. */
export interface Usage {
  promptTokens: number;
  completionTokens: number;
  reasoningTokens: number;
  /** Prompt tokens the upstream read from its prompt cache (vLLM's prefix cache, OpenAI's); 0 when it did not say. */
  cachedTokens: number;
}

export type ToolCallDelta = Record<string, unknown>;

/** One step of a streamed answer, whatever backend produced it. */
export type CompletionEvent =
  /** `refusal`: the model's refusal as OpenAI's models give it (under Structured Outputs), apart from the content. */
  | { type: "delta"; content?: string; reasoning?: string; toolCalls?: ToolCallDelta[]; refusal?: string }
  /** `stopSequence`: which of the request's stop strings ended the answer, when the upstream says (vLLM does). */
  | { type: "finish"; reason: string; stopSequence?: string }
  | { type: "usage"; usage: Usage };

/**
 * The answer's text with a model's refusal (OpenAI's `refusal`, given apart from the content) after it: for an API
 * with no place of its own for a refusal, and for the red-line rules, which hold it to them as content.
 */
export function answerText(content: string | null | undefined, refusal: string | undefined): string | undefined {
  if (refusal === undefined) return content ?? undefined;
  return content ? content + refusal : refusal;
}

/** A whole answer. */
export interface Completion {
  content: string | null;
  reasoning: string | null;
  toolCalls: ToolCallDelta[] | null;
  /** The model's refusal, when it gave one apart from the content (OpenAI's `message.refusal`). */
  refusal?: string;
  finishReason: string;
  /** Which of the request's stop strings ended the answer, when the upstream says (vLLM's `stop_reason`). */
  stopSequence?: string;
  usage: Usage | undefined;
}

/** What Sluice sends to a backend: an OpenAI request body with the upstream's model name and max_tokens set. */
export interface BackendRequest {
  model: ModelConfig;
  body: Record<string, unknown>;
  signal: AbortSignal;
  /**
   * Sent as `X-Request-Id`: vLLM and SGLang take it as their own request's id, so their logs name Sluice's. A request
   * sent again (another server, a fallback) is sent as `ID-2`, `ID-3`, …: vLLM refuses an id still running, and an
   * aborted call may still be running there for a moment.
   */
  requestId: string;
  /** How many times the request was sent upstream before this call (over its fallbacks too); each send adds one. */
  sent: number;
  /** The request's trace: the caller's context passed on, or Sluice's own (src/tracing). */
  trace: TraceContext | undefined;
  /** The request's conversation as a number, when its model routes by affinity (see affinityOf). */
  affinity?: number;
  /** The server the call went to last (shown without credentials), set by the pool: the request's log line names it. */
  server?: string;
  /** A legacy text completion: `body` holds a `prompt`, and goes to the upstream's /completions route. */
  textCompletion?: boolean;
}

/**
 * A streamed answer's events in batches, as they arrived together: one step per network read, not per event, so that
 * a busy server (whose reads carry many events) spends one await per read. Its consumer reads one batch at a time,
 * may empty each batch once it has used it, and calls `return` when it stops before the end. An async generator is
 * one.
 */
export interface EventStream {
  next(): Promise<IteratorResult<CompletionEvent[], void>>;
  return(value?: undefined): Promise<IteratorResult<CompletionEvent[], void>>;
}

/** How a stream's upstream call ended, for whoever keeps its server's health: it finished, failed, or was stopped. */
export type StreamEnding = "finished" | "stopped" | { failure: unknown };

export type { ServerHealth };

/** An embeddings answer as the upstream gave it: its items checked, and the prompt tokens it reported (if it did). */
export interface Embeddings {
  /** Each input's vector, in input order: numbers, or base64 text when the request asked for `encoding_format: "base64"`. */
  vectors: (number[] | string)[];
  promptTokens: number | undefined;
}

/** An OpenAI-compatible model server, or the built-in demo. Failures are thrown as UpstreamError. */
export interface Backend {
  complete(request: BackendRequest): Promise<Completion>;
  stream(request: BackendRequest): EventStream;
  /** POST /embeddings; none for the demo. */
  embed?(request: BackendRequest): Promise<Embeddings>;
  /** Its servers' health; none for the demo. */
  servers?(): ServerHealth[];
}
