import { Type, type Static } from "@sinclair/typebox";
import type { SluiceError } from "../../errors";
import { validateBody } from "../../validation";

const ContentPart = Type.Object({ type: Type.String({ minLength: 1 }) }, { additionalProperties: true });

export const MessageSchema = Type.Object(
  {
    role: Type.String({ minLength: 1, description: "system, developer, user, assistant or tool" }),
    content: Type.Optional(Type.Union([Type.String(), Type.Array(ContentPart), Type.Null()], { expected: "a string, an array of content parts, or null" })),
  },
  { additionalProperties: true },
);

/** Spec section 2.3. Fields not named here are ignored (and not sent upstream), except the forwarded ones. */
export const ChatRequestSchema = Type.Object(
  {
    model: Type.String({ minLength: 1 }),
    messages: Type.Array(MessageSchema, { minItems: 1 }),
    stream: Type.Optional(Type.Boolean()),
    stream_options: Type.Optional(Type.Object({ include_usage: Type.Optional(Type.Boolean()) }, { additionalProperties: true })),
    max_tokens: Type.Optional(Type.Integer({ minimum: 1, description: "Output limit, reasoning included. Default 8192" })),
    max_completion_tokens: Type.Optional(Type.Integer({ minimum: 1, description: "Same meaning as max_tokens" })),
    n: Type.Optional(Type.Integer({ minimum: 1, description: "Only 1 is supported" })),
    temperature: Type.Optional(Type.Number({ minimum: 0, maximum: 2 })),
    top_p: Type.Optional(Type.Number({ minimum: 0, maximum: 1 })),
    /** Names the conversation, as OpenAI's prompt caching takes it: a model routed by affinity keeps it on one server. */
    prompt_cache_key: Type.Optional(Type.String()),
  },
  { additionalProperties: true },
);

export type ChatRequest = Static<typeof ChatRequestSchema>;
export type ChatMessage = Static<typeof MessageSchema>;

/** Sent upstream unchanged when present (spec section 2.3). */
export const forwardedFields = [
  "stop",
  "presence_penalty",
  "frequency_penalty",
  "seed",
  "response_format",
  "tools",
  "tool_choice",
  "parallel_tool_calls",
  "logprobs",
  "top_logprobs",
  "reasoning_effort",
] as const;

/** OpenAI accepts null for these optional fields and treats it as absent; so does Sluice. */
const nullableFields = ["stream", "stream_options", "max_tokens", "max_completion_tokens", "n", "temperature", "top_p", "prompt_cache_key"] as const;

/** Validates a parsed chat completions body; returns the typed request or a 400 naming the field. */
export function validateChatRequest(body: unknown): ChatRequest | SluiceError {
  return validateBody(ChatRequestSchema, body, nullableFields);
}

/**
 * A legacy text completion's prompt and the fields of its API sent upstream as they came (`suffix`, `echo`,
 * `logprobs`, `stop`, ...), carried on the chat request it was translated to (see modules/completions). Under a
 * symbol, which no JSON body can set.
 */
export const textPromptKey = Symbol("sluice.textPrompt");

export interface TextPrompt {
  prompt: string;
  fields: Record<string, unknown>;
}

/** The text completion a chat request stands for, if it does. */
export function textPromptOf(request: ChatRequest): TextPrompt | undefined {
  return (request as ChatRequest & { [textPromptKey]?: TextPrompt })[textPromptKey];
}
