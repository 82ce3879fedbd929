import { countChatTokens, countTextTokens, countTexts, type CountableMessage } from "../../tokens/count";
import type { Completion, CompletionEvent, Usage } from "../../upstream/types";

/** What a request is billed, and who counted it. */
export interface MeasuredUsage {
  usage: Usage;
  source: "upstream" | "tokenizer";
}

/** Pieces kept loose before they are joined into one flat block. */
const piecesPerBlock = 64;

/**
 * A text that grows a piece at a time, held compactly. Appending with `+=` builds a rope: a string object per
 * piece that lives until the answer ends (with 2,000 streams, most of the server's live strings). Joining every
 * 64 pieces into one flat block keeps a few objects instead; each character is copied once into its block and
 * once more if the text is read at the end.
 */
class GrowingText {
  private blocks: string[] = [];
  private pieces: string[] = [];

  add(piece: string): void {
    this.pieces.push(piece);
    if (this.pieces.length === piecesPerBlock) {
      this.blocks.push(this.pieces.join(""));
      this.pieces = [];
    }
  }

  toString(): string {
    return this.blocks.join("") + this.pieces.join("");
  }
}

/**
 * Follows what an answer produced, so that it can be billed even when the upstream never reports usage
 * (it has none, the client left, or the stream broke): then Sluice counts with its own tokenizer.
 */
export class UsageMeter {
  // Made at the first piece of each kind (so undefined means empty): most answers have no tool calls or reasoning.
  private content: GrowingText | undefined;
  private reasoning: GrowingText | undefined;
  private toolText: GrowingText | undefined;
  private reported: Usage | undefined;
  /** A whole answer, its texts kept as they came: read only if the tokenizer must count them. */
  private whole: Completion | undefined;

  observe(event: CompletionEvent): void {
    if (event.type === "usage") this.reported = event.usage;
    else if (event.type === "delta") {
      if (event.content) this.content = withPiece(this.content, event.content);
      // A refusal is output too, billed as content when the upstream reports no usage.
      if (event.refusal) this.content = withPiece(this.content, event.refusal);
      if (event.reasoning) this.reasoning = withPiece(this.reasoning, event.reasoning);
      if (event.toolCalls) this.toolText = withPiece(this.toolText, JSON.stringify(event.toolCalls));
    }
  }

  /** Whether the upstream produced anything (or reported usage) for this request. */
  producedAnything(): boolean {
    const whole = this.whole;
    if (whole) return this.reported !== undefined || Boolean(whole.content) || Boolean(whole.reasoning) || whole.toolCalls !== null || Boolean(whole.refusal);
    return this.reported !== undefined || this.content !== undefined || this.reasoning !== undefined || this.toolText !== undefined;
  }

  /** A whole answer: the only thing a meter observes when there is no stream. */
  observeCompletion(completion: Completion): void {
    this.whole = completion;
    this.reported = completion.usage;
  }

  /**
   * The upstream's usage when it sent one, otherwise Sluice's own count of what was produced. A promise only when
   * the tokenizer must count (on its own thread).
   */
  usage(messages: CountableMessage[], knownPromptTokens: number | undefined): MeasuredUsage | Promise<MeasuredUsage> {
    const reported = this.reported;
    // Some servers (vLLM among them) report no reasoning_tokens; the reasoning they streamed still counts.
    if (reported && (reported.reasoningTokens > 0 || !this.hasReasoning())) return { usage: reported, source: "upstream" };
    return this.counted(messages, knownPromptTokens);
  }

  private async counted(messages: CountableMessage[], knownPromptTokens: number | undefined): Promise<MeasuredUsage> {
    if (this.reported) {
      const reasoningTokens = Math.min(await countTextTokens(this.reasoningText()), this.reported.completionTokens);
      return { usage: { ...this.reported, reasoningTokens }, source: "upstream" };
    }
    const [promptTokens, [reasoningTokens = 0, contentTokens = 0, toolCallTokens = 0]] = await Promise.all([
      knownPromptTokens ?? countChatTokens(messages),
      countTexts([this.reasoningText(), this.contentText(), this.toolCallsText()]),
    ]);
    return {
      usage: {
        promptTokens,
        completionTokens: reasoningTokens + contentTokens + toolCallTokens,
        reasoningTokens,
        cachedTokens: 0,
      },
      source: "tokenizer",
    };
  }

  private hasReasoning(): boolean {
    return this.whole ? Boolean(this.whole.reasoning) : this.reasoning !== undefined;
  }

  private reasoningText(): string {
    return this.whole ? (this.whole.reasoning ?? "") : textOf(this.reasoning);
  }

  private contentText(): string {
    return this.whole ? (this.whole.content ?? "") + (this.whole.refusal ?? "") : textOf(this.content);
  }

  private toolCallsText(): string {
    if (this.whole) return this.whole.toolCalls ? JSON.stringify(this.whole.toolCalls) : "";
    return textOf(this.toolText);
  }
}

/** `text` with `piece` added; made at the first piece. */
function withPiece(text: GrowingText | undefined, piece: string): GrowingText {
  const grown = text ?? new GrowingText();
  grown.add(piece);
  return grown;
}

function textOf(text: GrowingText | undefined): string {
  return text?.toString() ?? "";
}
