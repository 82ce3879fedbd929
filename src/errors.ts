/**
 * The one error hierarchy of Sluice. Every failure a caller can see is a SluiceError; the HTTP layer maps it
 * to the OpenAI error body in one place (src/http/error-response.ts).
 */

export type ErrorCode =
  | "invalid_request"
  | "missing_api_key"
  | "invalid_api_key"
  | "ip_not_authorized"
  | "organization_inactive"
  | "model_not_found"
  | "rate_limit_exceeded"
  | "insufficient_quota"
  | "upstream_error"
  | "server_overloaded"
  | "model_unavailable"
  | "safety_unavailable"
  | "request_too_large"
  | "not_found"
  | "internal_error"
  // The console's own: a person signing in, not a program with a key.
  | "not_signed_in"
  | "wrong_credentials"
  | "csrf_token_invalid"
  | "forbidden"
  | "too_many_sign_in_attempts";

const statusByCode: Record<ErrorCode, number> = {
  invalid_request: 400,
  missing_api_key: 401,
  invalid_api_key: 401,
  ip_not_authorized: 401,
  organization_inactive: 403,
  model_not_found: 404,
  not_found: 404,
  request_too_large: 413,
  rate_limit_exceeded: 429,
  insufficient_quota: 429,
  upstream_error: 502,
  server_overloaded: 503,
  model_unavailable: 503,
  safety_unavailable: 503,
  internal_error: 500,
  not_signed_in: 401,
  wrong_credentials: 401,
  csrf_token_invalid: 403,
  forbidden: 403,
  too_many_sign_in_attempts: 429,
};

/** OpenAI's `error.type` for each code; the spec fixes only `rate_limit_error`, the rest follow OpenAI. */
const typeByCode: Record<ErrorCode, string> = {
  invalid_request: "invalid_request_error",
  missing_api_key: "invalid_request_error",
  invalid_api_key: "invalid_request_error",
  ip_not_authorized: "invalid_request_error",
  organization_inactive: "permission_error",
  model_not_found: "invalid_request_error",
  not_found: "invalid_request_error",
  request_too_large: "invalid_request_error",
  rate_limit_exceeded: "rate_limit_error",
  insufficient_quota: "insufficient_quota",
  upstream_error: "api_error",
  server_overloaded: "server_error",
  model_unavailable: "server_error",
  safety_unavailable: "server_error",
  internal_error: "server_error",
  not_signed_in: "authentication_error",
  wrong_credentials: "authentication_error",
  csrf_token_invalid: "permission_error",
  forbidden: "permission_error",
  too_many_sign_in_attempts: "rate_limit_error",
};

/** Anthropic's `error.type` for each code, for the Messages API (its status codes stay the spec's). */
const anthropicTypeByCode: Record<ErrorCode, string> = {
  invalid_request: "invalid_request_error",
  missing_api_key: "authentication_error",
  invalid_api_key: "authentication_error",
  ip_not_authorized: "authentication_error",
  organization_inactive: "permission_error",
  model_not_found: "not_found_error",
  not_found: "not_found_error",
  request_too_large: "request_too_large",
  rate_limit_exceeded: "rate_limit_error",
  insufficient_quota: "rate_limit_error",
  upstream_error: "api_error",
  server_overloaded: "overloaded_error",
  model_unavailable: "overloaded_error",
  safety_unavailable: "overloaded_error",
  internal_error: "api_error",
  not_signed_in: "authentication_error",
  wrong_credentials: "authentication_error",
  csrf_token_invalid: "permission_error",
  forbidden: "permission_error",
  too_many_sign_in_attempts: "rate_limit_error",
};

export interface SluiceErrorOptions {
  param?: string | null;
  /** Seconds; required for every 429 and 503 (spec section 7, retry rule 1). */
  retryAfterSeconds?: number;
  /**
   * The wait in milliseconds, when it is known that closely: sent as `retry-after-ms` besides `Retry-After`, which
   * the OpenAI and Anthropic SDKs read first, so a wait of 100 ms is not rounded up to a second.
   */
  retryAfterMs?: number;
  /** When false, `x-should-retry: false` tells OpenAI SDKs not to retry (quota exhaustion). */
  shouldRetry?: boolean;
  cause?: unknown;
}

export class SluiceError extends Error {
  readonly code: ErrorCode;
  readonly status: number;
  readonly type: string;
  readonly param: string | null;
  readonly retryAfterSeconds: number | undefined;
  readonly retryAfterMs: number | undefined;
  readonly shouldRetry: boolean | undefined;

  constructor(code: ErrorCode, message: string, options: SluiceErrorOptions = {}) {
    super(message, { cause: options.cause });
    this.name = "SluiceError";
    this.code = code;
    this.status = statusByCode[code];
    this.type = typeByCode[code];
    this.param = options.param ?? null;
    this.shouldRetry = options.shouldRetry;
    const needsRetryAfter = this.status === 429 || this.status === 503;
    this.retryAfterSeconds = options.retryAfterSeconds ?? (needsRetryAfter ? 1 : undefined);
    this.retryAfterMs = options.retryAfterMs;
  }

  /** The OpenAI error body: `{"error": {"message", "type", "param", "code"}}`. */
  toBody(): { error: { message: string; type: string; param: string | null; code: ErrorCode } } {
    return { error: { message: this.message, type: this.type, param: this.param, code: this.code } };
  }

  /** Anthropic's error body: `{"type": "error", "error": {"type", "message"}}`. */
  toAnthropicBody(): { type: "error"; error: { type: string; message: string } } {
    // Anthropic's error has no `param`: the parameter leads the message, as Anthropic's own messages do.
    const message = this.param && !this.message.includes(this.param) ? `${this.param}: ${this.message}` : this.message;
    return { type: "error", error: { type: anthropicTypeByCode[this.code], message } };
  }

  /** The headers this error adds to its response. */
  headers(): Record<string, string> {
    const headers: Record<string, string> = {};
    if (this.retryAfterSeconds !== undefined) headers["retry-after"] = String(Math.max(0, Math.ceil(this.retryAfterSeconds)));
    if (this.retryAfterMs !== undefined) headers["retry-after-ms"] = String(Math.max(0, Math.ceil(this.retryAfterMs)));
    if (this.shouldRetry === false) headers["x-should-retry"] = "false";
    return headers;
  }
}

/** 400 invalid_request with the offending parameter named as OpenAI writes it. */
export function invalidRequest(message: string, param: string | null = null): SluiceError {
  return new SluiceError("invalid_request", message, { param });
}

/** 400 for a required parameter that is absent, in OpenAI's words. */
export function missingParameter(param: string): SluiceError {
  return invalidRequest(`Missing required parameter: '${param}'.`, param);
}

/**
 * What a failed request knows about the upstream's part in it: whether the upstream had the request (and so did work
 * that is recorded in the ledger and billed). Both failures that can happen once a request is on its way carry it.
 */
interface UpstreamContact {
  /** False when no connection was made, or the caller left before the upstream had the request. */
  readonly reachedUpstream: boolean;
}

/** Whether the upstream did work for a request that ended with `error`: anything else than these two did. */
export function reachedUpstream(error: unknown): boolean {
  return !(error instanceof UpstreamError || error instanceof ClientGoneError) || error.reachedUpstream;
}

/** The caller went away; nobody is left to answer, but the work done so far is still accounted. */
export class ClientGoneError extends Error implements UpstreamContact {
  override name = "ClientGoneError";

  constructor(
    message: string,
    readonly reachedUpstream = true,
    options?: ErrorOptions,
  ) {
    super(message, options);
  }
}

/**
 * A failure of an upstream model server. `isRetryable` says whether trying again (here or on another upstream)
 * can help, as vercel/ai's APICallError does.
 */
export class UpstreamError extends SluiceError implements UpstreamContact {
  readonly isRetryable: boolean;
  readonly upstreamStatus: number | undefined;
  readonly reachedUpstream: boolean;

  constructor(
    message: string,
    options: {
      isRetryable: boolean;
      upstreamStatus?: number;
      code?: ErrorCode;
      param?: string | null;
      retryAfterSeconds?: number;
      reachedUpstream?: boolean;
      cause?: unknown;
    },
  ) {
    super(options.code ?? "upstream_error", message, options);
    this.name = "UpstreamError";
    this.isRetryable = options.isRetryable;
    this.upstreamStatus = options.upstreamStatus;
    this.reachedUpstream = options.reachedUpstream ?? true;
  }
}
