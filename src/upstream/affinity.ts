// Which server a conversation's calls prefer, so that each of its turns finds its earlier turns in that server's
// prefix cache (vLLM's automatic prefix caching, SGLang's radix cache, llama.cpp's slots): a turn that lands on
// another server computes the whole conversation again before its first token.

import type { CountableMessage } from "../tokens/count";

/**
 * A request's conversation as a number: its `prompt_cache_key` when it sent one (Codex sends its conversation's id), or
 * else its opening, the instructions and the first user turn, which each of a conversation's requests repeats
 * unchanged while the rest grows.
 */
export function affinityOf(promptCacheKey: string | undefined, messages: readonly CountableMessage[]): number {
  if (promptCacheKey !== undefined && promptCacheKey !== "") return Bun.hash.xxHash32(promptCacheKey);
  let hash = 0;
  for (const message of messages) {
    hash = Bun.hash.xxHash32(message.text, Bun.hash.xxHash32(message.role, hash));
    if (message.role === "user") break;
  }
  return hash;
}

/**
 * The weight of a server (`server`: a hash of its address) for a conversation, in rendezvous hashing: each
 * conversation prefers the server of the largest weight among those up. A server going out, or one added to the list,
 * moves only the conversations that preferred it (or now do), and every instance prefers the same server without
 * sharing anything. Murmur3's 32-bit finalizer over the two numbers.
 */
export function affinityWeight(affinity: number, server: number): number {
  let mixed = affinity ^ Math.imul(server, 0x9e3779b1);
  mixed ^= mixed >>> 16;
  mixed = Math.imul(mixed, 0x85ebca6b);
  mixed ^= mixed >>> 13;
  mixed = Math.imul(mixed, 0xc2b2ae35);
  mixed ^= mixed >>> 16;
  return mixed >>> 0;
}
