// Token counts for context checks and for upstreams that report no usage. The tokenizer is OpenAI's cl100k_base
// (gpt-tokenizer). Loading it takes ~150 ms and ~45 MB (o200k_base: ~340 ms, ~75 MB), so it is loaded only when
// an exact count is needed; admission works from estimateChatTokens.
import { entryPointModule } from "../entry-points";

type Tokenizer = typeof import("./tokenizer");

let tokenizer: Tokenizer | undefined;
let loading: Promise<Tokenizer> | undefined;

/** Starts loading the tokenizer (once) and resolves when it is ready. */
export function loadTokenizer(): Promise<Tokenizer> {
  loading ??= (import(entryPointModule("tokens/tokenizer.ts")) as Promise<Tokenizer>).then((module) => (tokenizer = module));
  return loading;
}

/** Tokens in a text; the tokenizer must be loaded (await loadTokenizer() first). */
export function countTextTokens(text: string): number {
  if (!tokenizer) throw new Error("tokenizer not loaded");
  return text.length === 0 ? 0 : tokenizer.countTokens(text);
}

export interface CountableMessage {
  role: string;
  text: string;
}

/** Per-message framing as in OpenAI's chat format: `<|start|>role<|message|>…<|end|>`, and the reply's primer. */
const tokensPerMessage = 3;
const replyPrimer = 3;

/** Tokens of a conversation in the chat format. */
export function countChatTokens(messages: CountableMessage[]): number {
  let total = replyPrimer;
  for (const message of messages) total += tokensPerMessage + countTextTokens(message.role) + countTextTokens(message.text);
  return total;
}

/**
 * An upper bound on countChatTokens without tokenizing: a byte-level BPE token is at least one byte, so a
 * text never has more tokens than UTF-8 bytes.
 */
export function chatTokensUpperBound(messages: CountableMessage[]): number {
  let total = replyPrimer;
  for (const message of messages) total += tokensPerMessage + Buffer.byteLength(message.role) + Buffer.byteLength(message.text);
  return total;
}

/** Bytes per token of typical text, for estimates. */
const bytesPerToken = 4;

/**
 * An estimate of countChatTokens without the tokenizer: the chat framing plus a token per 4 bytes of text. Used
 * where an estimate is enough (reserving quota at admission); the real count settles it afterwards.
 */
export function estimateChatTokens(messages: CountableMessage[]): number {
  let total = replyPrimer;
  for (const message of messages) {
    total += tokensPerMessage + Math.ceil(Buffer.byteLength(message.role) / bytesPerToken) + Math.ceil(Buffer.byteLength(message.text) / bytesPerToken);
  }
  return total;
}
