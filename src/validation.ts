// Checking parsed JSON against TypeBox models, with errors that name the field as a reader writes it: the request
// bodies of every API and the console, and the configuration file.
import type { Static, TSchema } from "@sinclair/typebox";
import { TypeCompiler, type TypeCheck } from "@sinclair/typebox/compiler";
import { ValueErrorType, type ValueError } from "@sinclair/typebox/errors";
import { invalidRequest, type SluiceError } from "./errors";

/** A TypeBox path such as `/messages/0/role` → `messages[0].role`, as OpenAI names parameters and operators read them. */
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

/**
 * A union's error names the whole union ("expected a string or an array of content blocks, but got an array"), even
 * when the value is of the one variant of its kind and only something inside it is wrong. That variant's own first
 * error names the field at fault, as OpenAI does ("Missing required parameter: 'messages[0].content[0].type'").
 */
function innermost(error: ValueError): ValueError {
  if (error.type !== ValueErrorType.Union) return error;
  const kind = Array.isArray(error.value) ? "array" : typeof error.value === "object" && error.value !== null ? "object" : typeof error.value;
  const variants = (error.schema as { anyOf?: { type?: string }[] }).anyOf ?? [];
  const ofKind = variants.flatMap((variant, index) => (variant.type === kind || (kind === "number" && variant.type === "integer") ? [index] : []));
  if (ofKind.length !== 1) return error;
  const inner = error.errors?.[ofKind[0] as number]?.First();
  return inner ? innermost(inner) : error;
}

/** Deeper than this, a body is refused: it would only serve to exhaust the stack of whoever walks it next. */
const maxNestingDepth = 64;

/**
 * Whether a parsed JSON value nests deeper than `limit`. The recursion stops at `limit` levels, so it cannot run
 * out of stack however deep the value goes; a walk with an explicit stack allocated a pair per object.
 */
function nestsDeeperThan(value: unknown, limit: number): boolean {
  return typeof value === "object" && value !== null && objectNestsDeeperThan(value, limit);
}

// Only objects and arrays are recursed into: a call for every string and number took half of the walk's time (0.072
// against 0.036 µs for a one-message body, 0.67 against 0.31 for twelve messages and a tool; bench/HISTORY.md).
function objectNestsDeeperThan(value: object, limit: number): boolean {
  if (limit === 0) return true;
  if (Array.isArray(value)) {
    for (let index = 0; index < value.length; index++) {
      const child: unknown = value[index];
      if (typeof child === "object" && child !== null && objectNestsDeeperThan(child, limit - 1)) return true;
    }
    return false;
  }
  for (const key in value) {
    const child = (value as Record<string, unknown>)[key];
    if (typeof child === "object" && child !== null && objectNestsDeeperThan(child, limit - 1)) return true;
  }
  return false;
}

// Each model is compiled the first time a body is checked against it, not when its module loads: compiling every
// API's models took ~15 ms of start-up, and most servers never see most of the routes.
const compiledModels = new WeakMap<TSchema, TypeCheck<TSchema>>();

function compiledModel(model: TSchema): TypeCheck<TSchema> {
  let check = compiledModels.get(model);
  if (!check) {
    check = TypeCompiler.Compile(model);
    compiledModels.set(model, check);
  }
  return check;
}

/**
 * Validates a parsed JSON body against a TypeBox model, after dropping the optional fields sent as null; returns
 * the typed body or a 400 invalid_request naming the first wrong field as OpenAI names parameters.
 */
export function validateBody<T extends TSchema>(schema: T, body: unknown, nullable: readonly string[]): Static<T> | SluiceError {
  if (typeof body !== "object" || body === null || Array.isArray(body)) {
    return invalidRequest(`The request body must be a JSON object, but got ${typeName(body)}.`);
  }
  if (nestsDeeperThan(body, maxNestingDepth)) return invalidRequest(`The request body nests deeper than ${maxNestingDepth} levels.`);
  const record = body as Record<string, unknown>;
  for (const field of nullable) if (record[field] === null) delete record[field];
  const model = compiledModel(schema);
  if (model.Check(record)) return record as Static<T>;
  const error = innermost(model.Errors(record).First() as ValueError);
  const param = paramOf(error.path);
  return invalidRequest(describe(error, param), param || null);
}
