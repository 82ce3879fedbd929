// The console API's request bodies: validated by these models before a service sees them, and typed by them.
import { Type, type Static, type TSchema } from "@sinclair/typebox";
import { TypeCompiler, type TypeCheck } from "@sinclair/typebox/compiler";
import { invalidRequest } from "../../errors";
import { readBodyText } from "../../http/read-body";
import { validateBody } from "../../validation";

/** Console bodies are small; nothing the pages send comes near this. */
export const consoleBodyLimit = 64 * 1024;

export const SignUpBody = Type.Object({
  email: Type.String({ maxLength: 254 }),
  password: Type.String({ maxLength: 1024 }),
  organization: Type.String({ maxLength: 100 }),
});

export const SignInBody = Type.Object({
  email: Type.String({ maxLength: 254 }),
  password: Type.String({ maxLength: 1024 }),
});

export const CreateKeyBody = Type.Object({
  name: Type.String({ maxLength: 100 }),
  /** 90s, 30m, 12h or 30d; absent, null or empty for a key that never expires. */
  expires_in: Type.Optional(Type.Union([Type.String({ maxLength: 20 }), Type.Null()], { expected: "a string such as 30d, or null" })),
});

export const UpdateOrganizationBody = Type.Object({
  status: Type.Optional(Type.String({ maxLength: 20 })),
  plan: Type.Optional(Type.String({ maxLength: 100 })),
});

export type SignUp = Static<typeof SignUpBody>;
export type SignIn = Static<typeof SignInBody>;
export type CreateKey = Static<typeof CreateKeyBody>;
export type UpdateOrganization = Static<typeof UpdateOrganizationBody>;

const compiled = new WeakMap<TSchema, TypeCheck<TSchema>>();

/**
 * Reads a console request's JSON body within the console's limit and checks it against its model; 400 naming the
 * field, or 413. Changes must come as JSON: a cross-site form cannot send that without a CORS preflight.
 */
export async function readConsoleBody<T extends TSchema>(request: Request, model: T): Promise<Static<T>> {
  if (!(request.headers.get("content-type") ?? "").startsWith("application/json")) throw invalidRequest("Send JSON (Content-Type: application/json).");
  const text = await readBodyText(request, consoleBodyLimit);
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    throw invalidRequest("The body must be valid JSON.");
  }
  let check = compiled.get(model);
  if (!check) {
    check = TypeCompiler.Compile(model) as TypeCheck<TSchema>;
    compiled.set(model, check);
  }
  const result = validateBody(check, body, []);
  if (result instanceof Error) throw result;
  return result as Static<T>;
}
