import { Type, type Static, type TSchema } from "@sinclair/typebox";
import { TypeCompiler, type TypeCheck } from "@sinclair/typebox/compiler";
import { ValueErrorType, type ValueError } from "@sinclair/typebox/errors";
import { invalidRequest, type SluiceError } from "../../errors";

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
    stream_options: Type.Optional(
      Type.Object({ include_usage: Type.Optional(Type.Boolean()) }, { additionalProperties: true }),
    ),
    max_tokens: Type.Optional(Type.Integer({ minimum: 1, description: "Output limit, reasoning included. Default 8192" })),
    max_completion_tokens: Type.Optional(Type.Integer({ minimum: 1, description: "Same meaning as max_tokens" })),
    n: Type.Optional(Type.Integer({ minimum: 1, description: "Only 1 is supported" })),
    temperature: Type.Optional(Type.Number({ minimum: 0, maximum: 2 })),
    top_p: Type.Optional(Type.Number({ minimum: 0, maximum: 1 })),
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
const nullableFields = ["stream", "stream_options", "max_tokens", "max_completion_tokens", "n", "temperature", "top_p"] as const;

const compiled = TypeCompiler.Compile(ChatRequestSchema);

/** `/messages/0/role` → `messages[0].role`, as OpenAI names parameters. */
export function paramOf(path: string): string {
  return path
    .split("/")
    .filter(Boolean)
    .map((part, index) => (/^\d+$/.test(part) ? `[${part}]` : index === 0 ? part : `.${part}`))
    .join("");
}

function typeName(value: unknown): string {
  if (value === null) return "null";
  if (Array.isArray(value)) return "an array";
  if (typeof value === "object") return "an object";
  if (typeof value === "string") return "a string";
  if (typeof value === "number") return Number.isInteger(value) ? "an integer" : "a number";
  return `a ${typeof value}`;
}

const expectedByType: Partial<Record<ValueErrorType, string>> = {
  [ValueErrorType.String]: "a string",
  [ValueErrorType.Number]: "a number",
  [ValueErrorType.Integer]: "an integer",
  [ValueErrorType.Boolean]: "a boolean",
  [ValueErrorType.Array]: "an array",
  [ValueErrorType.Object]: "an object",
};

function describe(error: ValueError, param: string): string {
  const schema = error.schema as { minimum?: number; maximum?: number; minItems?: number; minLength?: number };
  switch (error.type) {
    case ValueErrorType.ObjectRequiredProperty:
      return `Missing required parameter: '${param}'.`;
    case ValueErrorType.NumberMinimum:
    case ValueErrorType.IntegerMinimum:
      return `Invalid '${param}': expected a value >= ${schema.minimum}, but got ${error.value} instead.`;
    case ValueErrorType.NumberMaximum:
    case ValueErrorType.IntegerMaximum:
      return `Invalid '${param}': expected a value <= ${schema.maximum}, but got ${error.value} instead.`;
    case ValueErrorType.ArrayMinItems:
      return `Invalid '${param}': empty array. Expected an array with minimum length ${schema.minItems}, but got an empty array instead.`;
    case ValueErrorType.StringMinLength:
      return `Invalid '${param}': string too short. Expected a string with minimum length ${schema.minLength}, but got an empty string instead.`;
    default: {
      // A union names what it accepts in its schema's `expected` option.
      const expected = (error.schema as { expected?: string }).expected ?? expectedByType[error.type];
      if (expected) return `Invalid type for '${param}': expected ${expected}, but got ${typeName(error.value)} instead.`;
      return `Invalid '${param}': ${error.message}.`;
    }
  }
}

/** Deeper than this, a body is refused: it would only serve to exhaust the stack of whoever walks it next. */
export const maxNestingDepth = 64;

/** Whether a parsed JSON value nests deeper than `limit` (walked without recursion). */
function nestsDeeperThan(value: unknown, limit: number): boolean {
  const stack: [unknown, number][] = [[value, 0]];
  while (stack.length > 0) {
    const [current, depth] = stack.pop() as [unknown, number];
    if (typeof current !== "object" || current === null) continue;
    if (depth >= limit) return true;
    for (const child of Array.isArray(current) ? current : Object.values(current)) {
      if (typeof child === "object" && child !== null) stack.push([child, depth + 1]);
    }
  }
  return false;
}

/**
 * Validates a parsed JSON body against a compiled TypeBox model, after dropping the optional fields sent as null;
 * returns the typed body or a 400 invalid_request naming the first wrong field as OpenAI names parameters.
 */
export function validateBody<T extends TSchema>(model: TypeCheck<T>, body: unknown, nullable: readonly string[]): Static<T> | SluiceError {
  if (typeof body !== "object" || body === null || Array.isArray(body)) {
    return invalidRequest(`The request body must be a JSON object, but got ${typeName(body)}.`);
  }
  if (nestsDeeperThan(body, maxNestingDepth)) return invalidRequest(`The request body nests deeper than ${maxNestingDepth} levels.`);
  const record = body as Record<string, unknown>;
  for (const field of nullable) if (record[field] === null) delete record[field];
  if (model.Check(record)) return record as Static<T>;
  const error = model.Errors(record).First() as ValueError;
  const param = paramOf(error.path);
  return invalidRequest(describe(error, param), param || null);
}

/** Validates a parsed chat completions body; returns the typed request or a 400 naming the field. */
export function validateChatRequest(body: unknown): ChatRequest | SluiceError {
  return validateBody(compiled, body, nullableFields);
}
