// The tokenizer's thread, and its own entry point of the executable (see count.ts). Building cl100k_base's tables
// takes 110-140 ms of CPU, and a long prompt takes milliseconds more to tokenize: here neither holds the server's
// event loop, where every request in flight would wait for it. The tables are most of Sluice's code by size, so the
// server's bundle does not carry them, and a server that never counts never starts this thread.
import { countTokens } from "gpt-tokenizer/encoding/cl100k_base";

declare const self: Worker;

/** What the server asks: the tokens of each text. */
export interface TokenizerRequest {
  id: number;
  texts: string[];
}

/** The counts, in the order of the texts; or why there are none. */
export interface TokenizerReply {
  id: number;
  counts?: number[];
  error?: string;
}

/**
 * A text that names a special token ("<|endoftext|>") is counted as the characters it is, as OpenAI reads such text in
 * a message; gpt-tokenizer would throw on it by default.
 */
const specialTokensAsText = { disallowedSpecial: new Set<string>() };

self.onmessage = (event: MessageEvent<TokenizerRequest>) => {
  const { id, texts } = event.data;
  let reply: TokenizerReply;
  try {
    reply = { id, counts: texts.map((text) => (text.length === 0 ? 0 : countTokens(text, specialTokensAsText))) };
  } catch (error) {
    reply = { id, error: error instanceof Error ? error.message : String(error) };
  }
  self.postMessage(reply);
};
