import { countChatTokens, countTexts } from "../tokens/count";
import { textOfContent } from "../tokens/text";
import { abortError } from "./errors";
import type { Backend, BackendRequest, Completion, CompletionEvent, Usage } from "./types";

interface Script {
  reasoning: string[];
  content: string[];
  finishReason: string;
  usage: Usage;
}

/** Splits a text into word-sized pieces, each keeping its trailing space, as a model streams them. */
function pieces(text: string): string[] {
  return text.match(/\S+\s*|\s+/g) ?? [];
}

/** Cuts pieces once their tokens (`costs`, in the same order) would pass the budget; returns the kept pieces and their tokens. */
function takeWithin(all: string[], costs: number[], budget: number): { kept: string[]; tokens: number } {
  const kept: string[] = [];
  let tokens = 0;
  for (const [index, piece] of all.entries()) {
    const cost = costs[index] ?? 0;
    if (tokens + cost > budget) break;
    kept.push(piece);
    tokens += cost;
  }
  return { kept, tokens };
}

/**
 * The built-in demo model, labelled as such: it "reasons" deterministically about the last user message
 * (restating it and counting its words), answers, and reports usage counted with the real tokenizer.
 */
export class DemoBackend implements Backend {
  async complete(request: BackendRequest): Promise<Completion> {
    const script = await this.script(request);
    const aborted = abortError(request.model.id, request.signal);
    if (aborted) throw aborted;
    return {
      reasoning: script.reasoning.join("") || null,
      content: script.content.join("") || null,
      toolCalls: null,
      finishReason: script.finishReason,
      usage: script.usage,
    };
  }

  async *stream(request: BackendRequest): AsyncGenerator<CompletionEvent[]> {
    const script = await this.script(request);
    const delay = request.model.streamDelayMs;
    for (const [kind, parts] of [
      ["reasoning", script.reasoning],
      ["content", script.content],
    ] as const) {
      for (const part of parts) {
        if (delay > 0) await Bun.sleep(delay);
        const aborted = abortError(request.model.id, request.signal);
        if (aborted) throw aborted;
        yield [kind === "reasoning" ? { type: "delta", reasoning: part } : { type: "delta", content: part }];
      }
    }
    yield [
      { type: "finish", reason: script.finishReason },
      { type: "usage", usage: script.usage },
    ];
  }

  private async script(request: BackendRequest): Promise<Script> {
    // A text completion's prompt is read as one user message.
    const sent = request.textCompletion ? [{ role: "user", content: request.body.prompt }] : request.body.messages;
    const messages = (sent as { role: string; content?: unknown }[]).map((message) => ({
      role: message.role,
      text: textOfContent(message.content),
    }));
    const question =
      [...messages]
        .reverse()
        .find((message) => message.role === "user")
        ?.text.trim() ?? "";
    const words = question.split(/\s+/).filter(Boolean).length;
    const quoted = question.length > 200 ? `${question.slice(0, 200)}…` : question;
    const reasoningText =
      `The user wrote: "${quoted}". That is ${words} word${words === 1 ? "" : "s"} and ${question.length} characters. ` +
      "I will restate the question and report its length.";
    const contentText =
      `You asked: "${quoted}" (${words} word${words === 1 ? "" : "s"}). ` +
      "This answer comes from Sluice's built-in demo model; configure a real model in sluice.toml for real answers.";
    const budget = Number(request.body.max_tokens ?? request.body.max_completion_tokens ?? 8192);
    const reasoningPieces = pieces(reasoningText);
    const contentPieces = pieces(contentText);
    const [promptTokens, costs] = await Promise.all([countChatTokens(messages), countTexts([...reasoningPieces, ...contentPieces])]);
    const reasoning = takeWithin(reasoningPieces, costs, budget);
    const content = takeWithin(contentPieces, costs.slice(reasoningPieces.length), budget - reasoning.tokens);
    const complete = reasoning.kept.length === reasoningPieces.length && content.kept.length === contentPieces.length;
    return {
      reasoning: reasoning.kept,
      content: content.kept,
      finishReason: complete ? "stop" : "length",
      usage: {
        promptTokens,
        completionTokens: reasoning.tokens + content.tokens,
        reasoningTokens: reasoning.tokens,
        cachedTokens: 0,
      },
    };
  }
}
