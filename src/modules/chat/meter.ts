import { countChatTokens, countTextTokens, loadTokenizer, type CountableMessage } from "../../tokens/count";
import type { Completion, CompletionEvent, Usage } from "../../upstream/types";

/**
 * Follows what an answer produced, so that it can be billed even when the upstream never reports usage
 * (it has none, the client left, or the stream broke): then Sluice counts with its own tokenizer.
 */
export class UsageMeter {
  private content = "";
  private reasoning = "";
  private toolText = "";
  private reported: Usage | undefined;

  observe(event: CompletionEvent): void {
    if (event.type === "usage") this.reported = event.usage;
    else if (event.type === "delta") {
      if (event.content) this.content += event.content;
      if (event.reasoning) this.reasoning += event.reasoning;
      if (event.toolCalls) this.toolText += JSON.stringify(event.toolCalls);
    }
  }

  /** Whether the upstream produced anything (or reported usage) for this request. */
  producedAnything(): boolean {
    return this.reported !== undefined || this.content !== "" || this.reasoning !== "" || this.toolText !== "";
  }

  observeCompletion(completion: Completion): void {
    this.content = completion.content ?? "";
    this.reasoning = completion.reasoning ?? "";
    this.toolText = completion.toolCalls ? JSON.stringify(completion.toolCalls) : "";
    this.reported = completion.usage;
  }

  /** The upstream's usage when it sent one, otherwise Sluice's own count of what was produced. */
  async usage(messages: CountableMessage[], knownPromptTokens: number | undefined): Promise<{ usage: Usage; source: "upstream" | "tokenizer" }> {
    if (this.reported) {
      // Some servers (vLLM among them) report no reasoning_tokens; the reasoning they streamed still counts.
      if (this.reported.reasoningTokens > 0 || !this.reasoning) return { usage: this.reported, source: "upstream" };
      await loadTokenizer();
      const reasoningTokens = Math.min(countTextTokens(this.reasoning), this.reported.completionTokens);
      return { usage: { ...this.reported, reasoningTokens }, source: "upstream" };
    }
    await loadTokenizer();
    const reasoningTokens = countTextTokens(this.reasoning);
    return {
      usage: {
        promptTokens: knownPromptTokens ?? countChatTokens(messages),
        completionTokens: reasoningTokens + countTextTokens(this.content) + countTextTokens(this.toolText),
        reasoningTokens,
      },
      source: "tokenizer",
    };
  }
}
