import type { SluiceError } from "../../errors";
import { doneEvent, serverSentData } from "../../upstream/sse";
import type { Completion, ToolCallDelta, Usage } from "../../upstream/types";
import type { AnswerEvent, AnswerFormat, ResponseIdentity, StreamEncoder, StreamStart } from "./format";

function completionId(identity: ResponseIdentity): string {
  return `chatcmpl-${identity.requestId.slice(4)}`;
}

/**
 * The OpenAI `chat.completion` object as JSON text. Written as text, as the stream's chunks are, rather than built
 * as an object and serialized: five objects an answer fewer, and a third of the serializing (0.15 against 0.45-0.49
 * µs in a micro-benchmark; bench/HISTORY.md, forty-second session). Only the strings from outside (the model's
 * name, content, reasoning, tool calls, finish reason) go through JSON.stringify.
 */
export function completionText(identity: ResponseIdentity, completion: Completion, usage: Usage): string {
  const toolCalls = completion.toolCalls ? `,"tool_calls":${JSON.stringify(withIds(identity, completion.toolCalls))}` : "";
  return (
    `{"id":${JSON.stringify(completionId(identity))},"object":"chat.completion","created":${identity.created},"model":${JSON.stringify(identity.model)},` +
    `"choices":[{"index":0,"message":{"role":"assistant","content":${JSON.stringify(completion.content)},"reasoning_content":${JSON.stringify(completion.reasoning)},"refusal":${completion.refusal === undefined ? "null" : JSON.stringify(completion.refusal)}${toolCalls}},` +
    `"logprobs":null,"finish_reason":${JSON.stringify(completion.finishReason)}}],"usage":${usageText(usage)}}`
  );
}

/**
 * A function call's `id` is how the caller answers it (the tool message's `tool_call_id`): one the upstream left out
 * (TGI sends "") is made here, for a whole answer's call and for the delta that opens a streamed one (the one with
 * `type`, see toolCallsOf). Made from the request id and the call's place, as the Responses and Messages APIs make theirs.
 */
function withIds(identity: ResponseIdentity, calls: ToolCallDelta[]): ToolCallDelta[] {
  const lacksId = (call: ToolCallDelta) => call.type === "function" && call.id === undefined;
  if (!calls.some(lacksId)) return calls;
  return calls.map((call, position) =>
    lacksId(call) ? { id: `call_${identity.requestId.slice(4)}_${typeof call.index === "number" ? call.index : position}`, ...call } : call,
  );
}

function usageText(usage: Usage): string {
  return (
    `{"prompt_tokens":${usage.promptTokens},"completion_tokens":${usage.completionTokens},"total_tokens":${usage.promptTokens + usage.completionTokens},` +
    `"prompt_tokens_details":{"cached_tokens":${usage.cachedTokens}},"completion_tokens_details":{"reasoning_tokens":${usage.reasoningTokens}}}`
  );
}

/** What follows a delta's fields in every delta frame. */
const deltaEnd = `},"logprobs":null,"finish_reason":null}],"usage":null}\n\n`;

/**
 * Writes the `chat.completion.chunk` events of one stream. The parts every chunk shares are serialized once per
 * stream; a delta frame is pushed as pieces (the stream's opening up to the delta, each field's encoded text, the
 * shared end), which the response writes one after the other: a frame built as one string would be a rope that the
 * write flattens into a copy, for each of the hundreds of chunks of thousands of streams.
 */
export class ChunkEncoder implements StreamEncoder {
  private readonly head: string;
  /** `data: ` and the chunk up to the inside of its delta object. */
  private readonly deltaStart: string;
  private readonly includeUsage: boolean;

  constructor(
    private readonly identity: ResponseIdentity,
    start: StreamStart,
  ) {
    this.head = `{"id":${JSON.stringify(completionId(identity))},"object":"chat.completion.chunk","created":${identity.created},"model":${JSON.stringify(identity.model)},"choices":`;
    this.deltaStart = `data: ${this.head}[{"index":0,"delta":{`;
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
    out.push(this.deltaStart);
    let separator = "";
    if (event.reasoning !== undefined) {
      out.push('"reasoning_content":', JSON.stringify(event.reasoning));
      separator = ",";
    }
    if (event.content !== undefined) {
      out.push(separator ? ',"content":' : '"content":', JSON.stringify(event.content));
      separator = ",";
    }
    if (event.toolCalls !== undefined) {
      out.push(separator ? ',"tool_calls":' : '"tool_calls":', JSON.stringify(withIds(this.identity, event.toolCalls)));
      separator = ",";
    }
    if (event.refusal !== undefined) out.push(separator ? ',"refusal":' : '"refusal":', JSON.stringify(event.refusal));
    out.push(deltaEnd);
  }

  /** The usage chunk (no choices) when `stream_options.include_usage` is true, then `[DONE]`. */
  end(usage: Usage, out: string[]): void {
    if (this.includeUsage) out.push(serverSentData(`${this.head}[],"usage":${usageText(usage)}}`));
    out.push(doneEvent);
  }

  /** The OpenAI error object as the last event, then `[DONE]`, as OpenAI ends a stream that failed. */
  fail(error: SluiceError, out: string[]): void {
    out.push(serverSentData(JSON.stringify(error.toBody())), doneEvent);
  }
}

/** Chat Completions, the API every other one is translated onto. */
export const chatFormat: AnswerFormat = {
  whole: completionText,
  stream: (identity, start) => new ChunkEncoder(identity, start),
};
