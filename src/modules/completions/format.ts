import type { SluiceError } from "../../errors";
import { doneEvent, serverSentData } from "../../upstream/sse";
import type { Completion, Usage } from "../../upstream/types";
import type { AnswerEvent, AnswerFormat, ResponseIdentity, StreamEncoder, StreamStart } from "../chat/format";

function completionId(identity: ResponseIdentity): string {
  return `cmpl-${identity.requestId.slice(4)}`;
}

function usageText(usage: Usage): string {
  return `{"prompt_tokens":${usage.promptTokens},"completion_tokens":${usage.completionTokens},"total_tokens":${usage.promptTokens + usage.completionTokens}}`;
}

/** The `text_completion` object. The text is the answer's content; a reasoning model's reasoning is not part of it. */
function completionText(identity: ResponseIdentity, completion: Completion, usage: Usage): string {
  return (
    `{"id":${JSON.stringify(completionId(identity))},"object":"text_completion","created":${identity.created},"model":${JSON.stringify(identity.model)},` +
    `"choices":[{"text":${JSON.stringify(completion.content ?? "")},"index":0,"logprobs":null,"finish_reason":${JSON.stringify(completion.finishReason)}}],` +
    `"usage":${usageText(usage)}}`
  );
}

/** A stream of `text_completion` chunks, as OpenAI sends them: text only, no opening chunk, then the finish. */
class TextChunkEncoder implements StreamEncoder {
  private readonly head: string;
  private readonly includeUsage: boolean;

  constructor(identity: ResponseIdentity, start: StreamStart) {
    this.head = `{"id":${JSON.stringify(completionId(identity))},"object":"text_completion","created":${identity.created},"model":${JSON.stringify(identity.model)},"choices":`;
    this.includeUsage = start.includeUsage;
  }

  start(): void {}

  event(event: AnswerEvent, out: string[]): void {
    if (event.type === "finish") {
      out.push(serverSentData(`${this.head}[{"text":"","index":0,"logprobs":null,"finish_reason":${JSON.stringify(event.reason)}}]}`));
      return;
    }
    // Reasoning, tool calls and a refusal apart from the content have no place in a text completion.
    if (event.content === undefined || event.content === "") return;
    out.push(serverSentData(`${this.head}[{"text":${JSON.stringify(event.content)},"index":0,"logprobs":null,"finish_reason":null}]}`));
  }

  /** The usage chunk (no choices) when `stream_options.include_usage` is true, then `[DONE]`. */
  end(usage: Usage, out: string[]): void {
    if (this.includeUsage) out.push(serverSentData(`${this.head}[],"usage":${usageText(usage)}}`));
    out.push(doneEvent);
  }

  fail(error: SluiceError, out: string[]): void {
    out.push(serverSentData(JSON.stringify(error.toBody())), doneEvent);
  }
}

/** The legacy text completions API (POST /v1/completions). */
export const textCompletionFormat: AnswerFormat = {
  whole: completionText,
  stream: (identity, start) => new TextChunkEncoder(identity, start),
};
