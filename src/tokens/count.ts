// Token counts for context checks and for upstreams that report no usage. The tokenizer is OpenAI's cl100k_base
// (gpt-tokenizer). Loading it takes ~150 ms and ~45 MB (o200k_base: ~340 ms, ~75 MB), so it runs on a thread of its
// own (tokenizer-worker.ts), started at the first exact count: a server that never counts never loads it, and the
// event loop never waits for the tables to build or a long prompt to tokenize. Admission works from
// estimateChatTokens.
import { entryPointModule } from "../entry-points";
import type { TokenizerReply, TokenizerRequest } from "./tokenizer-worker";

/** A count the tokenizer's thread could not give (it failed, or stopped before answering). */
class TokenizerError extends Error {}

interface Waiting {
  resolve(counts: number[]): void;
  reject(error: Error): void;
}

/** A tokenizer's thread and the counts it owes. */
interface Thread {
  worker: Worker;
  waiting: Map<number, Waiting>;
}

let current: Thread | undefined;
let lastId = 0;

function startThread(): Thread {
  const worker = new Worker(entryPointModule("tokens/tokenizer-worker.ts"));
  const thread: Thread = { worker, waiting: new Map() };
  worker.onmessage = (event: MessageEvent<TokenizerReply>) => {
    const reply = event.data;
    const waiter = thread.waiting.get(reply.id);
    if (!waiter) return;
    thread.waiting.delete(reply.id);
    if (reply.counts) waiter.resolve(reply.counts);
    else waiter.reject(new TokenizerError(`the tokenizer failed: ${reply.error}`));
    // Only a count in flight keeps a process (a CLI command) alive.
    if (thread.waiting.size === 0) worker.unref();
  };
  // A thread that died or exited: every count it owed fails, never waits for ever (a request holds its places while
  // it waits), and the next count starts a new thread. A thread that exits fires only "close", one that throws "error".
  const stopped = (reason: string) => {
    if (current === thread) current = undefined;
    worker.terminate();
    for (const waiter of thread.waiting.values()) waiter.reject(new TokenizerError(`the tokenizer's thread stopped: ${reason}`));
    thread.waiting.clear();
  };
  worker.onerror = (event) => stopped(event.message);
  worker.addEventListener("close", () => stopped("it exited"));
  return thread;
}

/** The tokens of each text, in order, counted on the tokenizer's thread (started at the first call). */
export function countTexts(texts: string[]): Promise<number[]> {
  current ??= startThread();
  const thread = current;
  const id = ++lastId;
  return new Promise<number[]>((resolve, reject) => {
    thread.waiting.set(id, { resolve, reject });
    thread.worker.ref();
    const request: TokenizerRequest = { id, texts };
    thread.worker.postMessage(request);
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

/** An estimate of a text's tokens without the tokenizer: a token per 4 bytes. */
export function estimateTextTokens(text: string): number {
  return Math.ceil(Buffer.byteLength(text) / bytesPerToken);
}

/**
 * An estimate of countChatTokens without the tokenizer: the chat framing plus a token per 4 bytes of text. Used
 * where an estimate is enough (reserving quota at admission); the real count settles it afterwards.
 */
export function estimateChatTokens(messages: CountableMessage[]): number {
  let total = replyPrimer;
  for (const message of messages) {
    total += tokensPerMessage + estimateTextTokens(message.role) + estimateTextTokens(message.text);
  }
  return total;
}
