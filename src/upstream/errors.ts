import { ClientGoneError, SluiceError, UpstreamError } from "../errors";
import { DeadlineExceeded } from "./deadlines";

const contextLengthPattern = /context length|context window|maximum context|too many tokens|prompt is too long|exceeds? the (?:model'?s? )?(?:max|context)/i;

function messageOf(body: string): string {
  try {
    const parsed = JSON.parse(body) as { error?: { message?: unknown } | string; message?: unknown; detail?: unknown };
    if (typeof parsed.error === "string") return parsed.error;
    if (typeof parsed.error?.message === "string") return parsed.error.message;
    if (typeof parsed.message === "string") return parsed.message;
    if (typeof parsed.detail === "string") return parsed.detail;
  } catch {
    // not JSON: fall through to the raw text
  }
  return body.slice(0, 500);
}

/** The longest wait passed on from an upstream's Retry-After: an hour (OpenAI's SDK itself waits at most a minute). */
const maxRetryAfterSeconds = 3600;

/**
 * An upstream's Retry-After in seconds, as HTTP allows it (a number of seconds, or a date), at least 1 and at most
 * `maxRetryAfterSeconds`; 1 when it has none or it cannot be read.
 */
function retryAfterSeconds(header: string | null, now: number): number {
  if (header === null || header.trim() === "") return 1;
  let seconds = Number(header);
  if (Number.isNaN(seconds)) seconds = (Date.parse(header) - now) / 1000;
  if (!(seconds >= 1)) return 1;
  return Math.min(Math.ceil(seconds), maxRetryAfterSeconds);
}

/**
 * Maps an upstream's non-200 answer to the error the caller sees. `namedByCaller`: the upstream's model name is the
 * caller's own (a prefix model's).
 */
export function errorFromStatus(modelId: string, status: number, body: string, retryAfterHeader: string | null, namedByCaller = false): UpstreamError {
  const upstreamMessage = messageOf(body);
  // A prefix model's upstream name is the caller's choice: a 404 for it is the caller's unknown model, not a server
  // that Sluice was set up wrong for (which a 404 means for a model whose upstream name the configuration gives).
  if (status === 404 && namedByCaller) {
    return new UpstreamError(`The upstream of model ${modelId} has no such model: ${upstreamMessage}`, {
      isRetryable: false,
      upstreamStatus: status,
      code: "model_not_found",
      param: "model",
    });
  }
  if (status === 400 || status === 413 || status === 422) {
    const isContext = contextLengthPattern.test(upstreamMessage);
    return new UpstreamError(
      isContext ? `This model's context is too long for the request: ${upstreamMessage}` : `The model rejected the request: ${upstreamMessage}`,
      { isRetryable: false, upstreamStatus: status, code: "invalid_request", param: isContext ? "messages" : null },
    );
  }
  if (status === 429 || status === 503) {
    return new UpstreamError(`Model ${modelId} is temporarily unavailable (upstream HTTP ${status}).`, {
      isRetryable: true,
      upstreamStatus: status,
      code: "model_unavailable",
      retryAfterSeconds: retryAfterSeconds(retryAfterHeader, Date.now()),
    });
  }
  return new UpstreamError(`The upstream for model ${modelId} failed (HTTP ${status}).`, {
    isRetryable: status >= 500,
    upstreamStatus: status,
  });
}

/**
 * Whether an upstream's 400 says it takes the output limit only as `max_completion_tokens`, as OpenAI's reasoning
 * models (o-series, GPT-5) and Azure's answer `max_tokens`: "Unsupported parameter: 'max_tokens' is not supported
 * with this model. Use 'max_completion_tokens' instead."
 */
export function asksForCompletionTokens(status: number, body: string): boolean {
  return status === 400 && /\bmax_tokens\b[\s\S]*\bmax_completion_tokens\b/.test(messageOf(body));
}

/** The abort reason of requests still open when the server's drain time is over. */
export class ServerShutdown extends Error {
  override name = "ServerShutdown";
}

/** Why the request's signal fired, if it did: the model's deadline (502), the server stopping (503), or the client leaving. */
export function abortError(modelId: string, signal: AbortSignal, reached = true): Error | undefined {
  if (!signal.aborted) return undefined;
  if (signal.reason instanceof ServerShutdown) {
    return new SluiceError("server_overloaded", "The server is restarting; the answer was cut short. Retry the request.", {
      retryAfterSeconds: 2,
      cause: signal.reason,
    });
  }
  if (signal.reason instanceof DeadlineExceeded) {
    return new UpstreamError(`The upstream for model ${modelId} gave ${signal.reason.message}.`, { isRetryable: true, cause: signal.reason });
  }
  return new ClientGoneError("client disconnected", reached);
}

/** fetch's codes for a server certificate whose chain does not lead to a trusted CA: a private CA, a self-signed one. */
const untrustedCertificateCodes = new Set([
  "UNABLE_TO_VERIFY_LEAF_SIGNATURE",
  "UNABLE_TO_GET_ISSUER_CERT",
  "UNABLE_TO_GET_ISSUER_CERT_LOCALLY",
  "SELF_SIGNED_CERT_IN_CHAIN",
  "DEPTH_ZERO_SELF_SIGNED_CERT",
]);

/** Whether fetch failed because it does not trust the server's certificate (see the README on NODE_EXTRA_CA_CERTS). */
export function isUntrustedCertificate(error: unknown): boolean {
  return untrustedCertificateCodes.has(String((error as { code?: unknown })?.code));
}

/** A certificate refused, for any reason: the TLS handshake failed, so no request was sent. */
function isCertificateFailure(error: unknown): boolean {
  const code = String((error as { code?: unknown })?.code);
  return untrustedCertificateCodes.has(code) || code === "ERR_TLS_CERT_ALTNAME_INVALID" || code === "CERT_HAS_EXPIRED" || code === "CERT_NOT_YET_VALID";
}

function isConnectionFailure(error: unknown): boolean {
  const code = (error as { code?: unknown })?.code;
  return (
    code === "ECONNREFUSED" ||
    code === "ConnectionRefused" ||
    code === "ENOTFOUND" ||
    code === "FailedToOpenSocket" ||
    code === "EHOSTUNREACH" ||
    isCertificateFailure(error)
  );
}

/**
 * Maps a thrown fetch failure: the client's abort, our timeout, or a connection failure. `reached` says whether
 * the upstream had the request: a whole answer from when it is sent (its status line comes only at the end), a
 * stream from when the upstream's status line arrived.
 */
export function errorFromFailure(modelId: string, error: unknown, signal: AbortSignal, reached: boolean): Error {
  const aborted = abortError(modelId, signal, reached);
  if (aborted) return aborted;
  if (error instanceof UpstreamError) return error;
  return new UpstreamError(`Could not reach the upstream for model ${modelId}: ${(error as Error)?.message ?? String(error)}`, {
    isRetryable: true,
    reachedUpstream: !isConnectionFailure(error),
    cause: error,
  });
}
