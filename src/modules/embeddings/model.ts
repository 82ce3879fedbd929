import { Type, type Static } from "@sinclair/typebox";
import { invalidRequest, SluiceError } from "../../errors";
import { validateBody } from "../../validation";

/** OpenAI's limit on the inputs of one request. */
export const maxInputs = 2048;

const TokenIds = Type.Array(Type.Integer({ minimum: 0 }), { minItems: 1 });

/** OpenAI's embeddings request. Fields not named here are ignored, and not sent upstream. */
export const EmbeddingsRequestSchema = Type.Object(
  {
    model: Type.String({ minLength: 1 }),
    input: Type.Union(
      [Type.String({ minLength: 1 }), Type.Array(Type.String({ minLength: 1 }), { minItems: 1 }), TokenIds, Type.Array(TokenIds, { minItems: 1 })],
      { expected: "a non-empty string, an array of them, an array of token ids, or an array of such arrays" },
    ),
    encoding_format: Type.Optional(Type.Union([Type.Literal("float"), Type.Literal("base64")])),
    dimensions: Type.Optional(Type.Integer({ minimum: 1 })),
    user: Type.Optional(Type.String()),
  },
  { additionalProperties: true },
);

export type EmbeddingsRequest = Static<typeof EmbeddingsRequestSchema>;

/** OpenAI accepts null for these optional fields and treats it as absent; so does Sluice. */
const nullableFields = ["encoding_format", "dimensions", "user"] as const;

/** Validates a parsed embeddings body; returns the typed request or a 400 naming the field. */
export function validateEmbeddingsRequest(body: unknown): EmbeddingsRequest | SluiceError {
  const request = validateBody(EmbeddingsRequestSchema, body, nullableFields);
  if (!(request instanceof SluiceError) && Array.isArray(request.input) && inputsIn(request.input) > maxInputs) {
    return invalidRequest(`input holds ${request.input.length} items; at most ${maxInputs} are allowed.`, "input");
  }
  return request;
}

/** The texts of an embeddings input, for the tokenizer: none for inputs of token ids, which count themselves. */
export function textsOf(input: EmbeddingsRequest["input"]): string[] {
  if (typeof input === "string") return [input];
  return input.every((item) => typeof item === "string") ? (input as string[]) : [];
}

/** The token ids of an embeddings input given as ids: how many there are. */
export function tokenIdsIn(input: EmbeddingsRequest["input"]): number {
  if (typeof input === "string") return 0;
  let count = 0;
  for (const item of input) {
    if (typeof item === "number") count++;
    else if (Array.isArray(item)) count += item.length;
  }
  return count;
}

/** How many vectors the answer holds: one for a text or a list of token ids, one an item for a list of them. */
export function inputsIn(input: EmbeddingsRequest["input"]): number {
  return typeof input === "string" || typeof input[0] === "number" ? 1 : input.length;
}
