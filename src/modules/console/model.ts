// The console API's request bodies: validated by these models before a service sees them, and typed by them.
import { Type, type Static, type TSchema } from "@sinclair/typebox";
import { requestRate } from "../../config/schema";
import { invalidRequest } from "../../errors";
import { readBodyText } from "../../http/read-body";
import { validateBody } from "../../validation";

/** Console bodies are small; nothing the pages send comes near this. */
const consoleBodyLimit = 64 * 1024;

export const SignUpBody = Type.Object({
  email: Type.String({ maxLength: 254 }),
  password: Type.String({ maxLength: 1024 }),
  organization: Type.String({ maxLength: 100 }),
});

export const SignInBody = Type.Object({
  email: Type.String({ maxLength: 254 }),
  password: Type.String({ maxLength: 1024 }),
});

const cap = Type.Optional(
  Type.Union([Type.Integer({ minimum: 1, maximum: 1e15 }), Type.Null()], { expected: "a whole number of at least 1, or null for none" }),
);

/** Addresses and CIDR ranges (a key's or an organization's); null: anywhere; absent: unchanged. */
const networksField = Type.Optional(
  Type.Union([Type.Array(Type.String({ maxLength: 50 }), { maxItems: 50 }), Type.Null()], {
    expected: "a list of IP addresses and CIDR ranges, or null for anywhere",
  }),
);

/** A key's own caps inside its organization's plan; absent or null: none. */
export const KeyLimitsBody = Type.Object({
  max_concurrency: cap,
  tokens_per_5h: cap,
  tokens_per_month: cap,
  requests_per_minute: Type.Optional(Type.Union([requestRate, Type.Null()], { expected: "a whole number from 1 to 1000000, or null for none" })),
  /** The models the key may call (ids within the plan's); null: every model of the plan; absent: unchanged. */
  models: Type.Optional(
    Type.Union([Type.Array(Type.String({ maxLength: 200 }), { maxItems: 200 }), Type.Null()], {
      expected: "a list of model ids, or null for every model of the plan",
    }),
  ),
  /** The addresses and CIDR ranges the key may be used from; null: anywhere; absent: unchanged. */
  networks: networksField,
});

/** 90s, 30m, 12h or 30d; absent, null or empty for a key or token that never expires. */
const expiresIn = Type.Optional(Type.Union([Type.String({ maxLength: 20 }), Type.Null()], { expected: "a string such as 30d, or null" }));

export const CreateKeyBody = Type.Composite([
  Type.Object({
    name: Type.String({ maxLength: 100 }),
    expires_in: expiresIn,
  }),
  KeyLimitsBody,
]);

export const RotateKeyBody = Type.Object({
  /** How long the old key keeps working: `now`, or 90s, 30m, 12h, 30d; 24h when absent. */
  grace: Type.Optional(Type.String({ maxLength: 20 })),
  /** The new key's lifetime; absent: the old key's, if it had one. */
  expires_in: expiresIn,
});

export const CreateOrganizationBody = Type.Object({
  name: Type.String({ maxLength: 100 }),
  /** `active` unless given. */
  status: Type.Optional(Type.String({ maxLength: 20 })),
  /** `default` unless given. */
  plan: Type.Optional(Type.String({ maxLength: 100 })),
});

export const CreateMemberBody = Type.Object({
  email: Type.String({ maxLength: 254 }),
  password: Type.String({ maxLength: 1024 }),
});

export const CreateTokenBody = Type.Object({
  name: Type.String({ maxLength: 100 }),
  expires_in: expiresIn,
});

export const UpdateOrganizationBody = Type.Object({
  status: Type.Optional(Type.String({ maxLength: 20 })),
  plan: Type.Optional(Type.String({ maxLength: 100 })),
  /** The networks its keys may be used from, unless a key names its own. */
  networks: networksField,
});

const filterText = Type.Optional(Type.String({ maxLength: 200 }));

/** The request log's filters, as query parameters. Times are `24h`/`7d` back from now, ISO 8601, or epoch ms. */
export const RequestLogQuery = Type.Object({
  since: filterText,
  until: filterText,
  key: filterText,
  model: filterText,
  outcome: filterText,
  /** A request id, as `x-request-id` showed it. */
  id: filterText,
  /** Operators only: one organization's id. */
  organization: filterText,
  cursor: filterText,
  limit: Type.Optional(Type.String({ pattern: "^[0-9]{1,3}$", expected: "a number of rows from 1 to 500" })),
});

/**
 * A usage report's month and grouping, as query parameters (see src/modules/usage/report.ts). Months only: they are
 * read from usage_key_months, where a span of hours would read usage_hours, which takes the server's thread for
 * hundreds of milliseconds at a million rows on SQLite (`sluice usage report --since` reads those in a process of its own).
 */
export const UsageReportQuery = Type.Object({
  month: filterText,
  by: filterText,
  /** Operators only: one organization's id. */
  organization: filterText,
});

export const AuditQuery = Type.Object({
  since: filterText,
  action: filterText,
  actor: filterText,
  organization: filterText,
  cursor: filterText,
  limit: Type.Optional(Type.String({ pattern: "^[0-9]{1,3}$", expected: "a number of rows from 1 to 500" })),
});

export type SignUp = Static<typeof SignUpBody>;
export type RequestLogQueryInput = Static<typeof RequestLogQuery>;
export type AuditQueryInput = Static<typeof AuditQuery>;
export type UsageReportQueryInput = Static<typeof UsageReportQuery>;
export type SignIn = Static<typeof SignInBody>;
export type CreateKey = Static<typeof CreateKeyBody>;
export type KeyLimitsInput = Static<typeof KeyLimitsBody>;
export type UpdateOrganization = Static<typeof UpdateOrganizationBody>;
export type CreateOrganization = Static<typeof CreateOrganizationBody>;
export type CreateToken = Static<typeof CreateTokenBody>;
export type CreateMember = Static<typeof CreateMemberBody>;
export type RotateKey = Static<typeof RotateKeyBody>;

function checked<T extends TSchema>(model: T, value: unknown): Static<T> {
  const result = validateBody(model, value, []);
  if (result instanceof Error) throw result;
  return result as Static<T>;
}

/** Checks a console request's query parameters against their model; 400 naming the parameter otherwise. */
export function readConsoleQuery<T extends TSchema>(query: Record<string, string | undefined>, model: T): Static<T> {
  return checked(model, { ...query });
}

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
  return checked(model, body);
}
