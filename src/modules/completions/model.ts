import { Type } from "@sinclair/typebox";
import { SluiceError, invalidRequest } from "../../errors";
import { validateBody } from "../../validation";
import { type ChatMessage, type ChatRequest, type TextPrompt, textPromptKey } from "../chat/model";

/** OpenAI's default output limit for a text completion, far below chat's: an autocomplete asks for a few tokens. */
export const defaultTextMaxTokens = 16;

/** The fields of the legacy `POST /v1/completions` that Sluice reads; others are ignored. */
export const CompletionsRequestSchema = Type.Object(
  {
    model: Type.String({ minLength: 1 }),
    prompt: Type.Union([Type.String(), Type.Array(Type.Unknown())], { expected: "a string, or an array of one string" }),
    suffix: Type.Optional(Type.String()),
    max_tokens: Type.Optional(Type.Integer({ minimum: 1, description: "Output limit. Default 16" })),
    temperature: Type.Optional(Type.Number({ minimum: 0, maximum: 2 })),
    top_p: Type.Optional(Type.Number({ minimum: 0, maximum: 1 })),
    n: Type.Optional(Type.Integer({ minimum: 1, description: "Only 1 is supported" })),
    best_of: Type.Optional(Type.Integer({ minimum: 1, description: "Only 1 is supported" })),
    stream: Type.Optional(Type.Boolean()),
    stream_options: Type.Optional(Type.Object({ include_usage: Type.Optional(Type.Boolean()) }, { additionalProperties: true })),
    logprobs: Type.Optional(Type.Integer({ minimum: 0, maximum: 5 })),
    echo: Type.Optional(Type.Boolean()),
    stop: Type.Optional(Type.Union([Type.String(), Type.Array(Type.String(), { maxItems: 4 })], { expected: "a string or an array of up to 4 strings" })),
    presence_penalty: Type.Optional(Type.Number({ minimum: -2, maximum: 2 })),
    frequency_penalty: Type.Optional(Type.Number({ minimum: -2, maximum: 2 })),
    seed: Type.Optional(Type.Integer()),
    logit_bias: Type.Optional(Type.Record(Type.String(), Type.Number())),
    user: Type.Optional(Type.String()),
  },
  { additionalProperties: true },
);

const nullableFields = [
  "suffix",
  "max_tokens",
  "temperature",
  "top_p",
  "n",
  "best_of",
  "stream",
  "stream_options",
  "logprobs",
  "echo",
  "stop",
  "presence_penalty",
  "frequency_penalty",
  "seed",
  "logit_bias",
  "user",
] as const;

/** Sent upstream as they came. */
const forwardedFields = ["suffix", "echo", "logprobs", "stop", "presence_penalty", "frequency_penalty", "seed", "logit_bias"] as const;

/** The prompt as one string: Sluice counts, checks and bills text, so token ids and several prompts are refused. */
function promptOf(prompt: string | unknown[]): string | SluiceError {
  if (typeof prompt === "string") return prompt;
  if (prompt.length === 1 && typeof prompt[0] === "string") return prompt[0];
  if (prompt.length > 0 && prompt.every((item) => typeof item === "string")) {
    return invalidRequest("Send one prompt a request: Sluice answers each request with one completion.", "prompt");
  }
  return invalidRequest("The prompt must be text (a string, or an array of one string); token ids are not accepted.", "prompt");
}

/**
 * Validates a text completion and translates it onto the chat path: the prompt (and suffix) as user messages, which
 * admission counts and the red-line rules check, and the text completion itself under `textPromptKey`, which the
 * upstream gets as it was sent (see prepareRequest).
 */
export function translateCompletionsRequest(body: unknown): ChatRequest | SluiceError {
  const original = validateBody(CompletionsRequestSchema, body, nullableFields);
  if (original instanceof SluiceError) return original;
  if (original.n !== undefined && original.n !== 1) return invalidRequest("Only n = 1 is supported.", "n");
  if (original.best_of !== undefined && original.best_of !== 1) return invalidRequest("Only best_of = 1 is supported.", "best_of");
  const prompt = promptOf(original.prompt);
  if (prompt instanceof SluiceError) return prompt;
  const messages: ChatMessage[] = [{ role: "user", content: prompt }];
  if (original.suffix !== undefined && original.suffix !== "") messages.push({ role: "user", content: original.suffix });
  const raw = original as Record<string, unknown>;
  const fields: Record<string, unknown> = {};
  for (const field of forwardedFields) if (raw[field] !== undefined) fields[field] = raw[field];
  const request: ChatRequest & { [textPromptKey]?: TextPrompt } = {
    model: original.model,
    messages,
    max_tokens: original.max_tokens ?? defaultTextMaxTokens,
  };
  if (original.stream !== undefined) request.stream = original.stream;
  if (original.stream_options !== undefined) request.stream_options = original.stream_options;
  if (original.temperature !== undefined) request.temperature = original.temperature;
  if (original.top_p !== undefined) request.top_p = original.top_p;
  request[textPromptKey] = { prompt, fields };
  return request;
}

/** Errors of the chat path name chat's parameters; a text completion's caller sent these instead. */
export const renamedParameters: Record<string, string> = { messages: "prompt" };
