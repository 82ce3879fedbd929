// Token counts for context checks and for upstreams that report no usage. The tokenizer is OpenAI's cl100k_base
// (gpt-tokenizer). Loading it takes ~150 ms and ~45 MB (o200k_base: ~340 ms, ~75 MB), so it runs on a thread of its
// own (tokenizer-worker.ts), started at the first exact count: a server that never counts never loads it, and the
// event loop never waits for the tables to build or a long prompt to tokenize. Admission works from
// estimateChatTokens.
import { entryPointModule } from "../entry-points";
import type { TokenizerReply, TokenizerRequest } from "./tokenizer-worker";

/** A count the tokenizer's thread could not give (it failed, or stopped before answering). */
export class TokenizerError extends Error {}

interface Waiting {
  resolve(counts: number[]): void;
  reject(error: Error): void;
}

let thread: Worker | undefined;
const waiting = new Map<number, Waiting>();
let lastId = 0;

function startThread(): Worker {
  const worker = new Worker(entryPointModule("tokens/tokenizer-worker.ts"));
  worker.onmessage = (event: MessageEvent<TokenizerReply>) => {
    const reply = event.data;
    const waiter = waiting.get(reply.id);
    if (!waiter) return;
    waiting.delete(reply.id);
    if (reply.counts) waiter.resolve(reply.counts);
    else waiter.reject(new TokenizerError(`the tokenizer failed: ${reply.error}`));
    // Only a count in flight keeps a process (a CLI command) alive.
    if (waiting.size === 0) worker.unref();
  };
  worker.onerror = (event) => {
    // The thread died: every count it owed fails, and the next count starts a new one.
    if (thread === worker) thread = undefined;
    worker.terminate();
    for (const waiter of waiting.values()) waiter.reject(new TokenizerError(`the tokenizer's thread stopped: ${event.message}`));
    waiting.clear();
  };
  return worker;
}

/** The tokens of each text, in order, counted on the tokenizer's thread (started at the first call). */
export function countTexts(texts: string[]): Promise<number[]> {
  thread ??= startThread();
  const worker = thread;
  const id = ++lastId;
  return new Promise<number[]>((resolve, reject) => {
    waiting.set(id, { resolve, reject });
    worker.ref();
    const request: TokenizerRequest = { id, texts };
    worker.postMessage(request);
  });
}

/** Tokens in a text. */
export async function countTextTokens(text: string): Promise<number> {
  const [count = 0] = await countTexts([text]);
  return count;
}

export interface CountableMessage {
  role: string;
  text: string;
}

/** Per-message framing as in OpenAI's chat format: `<|start|>role<|message|>…<|end|>`, and the reply's primer. */
const tokensPerMessage = 3;
const replyPrimer = 3;

/** Tokens of a conversation in the chat format. */
export async function countChatTokens(messages: CountableMessage[]): Promise<number> {
  const counts = await countTexts(messages.flatMap((message) => [message.role, message.text]));
  let total = replyPrimer + tokensPerMessage * messages.length;
  for (const count of counts) total += count;
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
