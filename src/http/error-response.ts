import { SluiceError } from "../errors";

/** OpenAI's routes over stored answers (`/v1/responses/{id}`, its input items, `/v1/chat/completions/{id}`, ...). */
const storedAnswerPath = /^\/v1\/(responses|chat\/completions)\/[^/]/;

/** Turns anything thrown while handling a request into a SluiceError; the one place errors are mapped. */
export function toSluiceError(error: unknown, elysiaCode: string | number, method: string, path: string): SluiceError {
  if (error instanceof SluiceError) return error;
  switch (elysiaCode) {
    case "NOT_FOUND":
      if (storedAnswerPath.test(path))
        return new SluiceError(
          "not_found",
          `Unknown route: ${method} ${path}. Sluice stores no responses or completions, so there is none to retrieve, list, cancel or delete; send the whole conversation with each request.`,
        );
      return new SluiceError("not_found", `Unknown route: ${method} ${path}.`);
    case "PARSE":
      return new SluiceError("invalid_request", "We could not parse the JSON body of your request.");
    case "VALIDATION":
      return new SluiceError("invalid_request", "The request is not valid.");
    default:
      // Never show internals; the request id lets an operator find the cause in the logs.
      return new SluiceError("internal_error", "The server had an error while processing your request.", { cause: error });
  }
}

/**
 * The error body as a Response, in the OpenAI shape or (for the Messages API) Anthropic's, with the request id
 * (Anthropic's clients read it from `request-id`) and the error's retry headers.
 */
export function errorResponse(error: SluiceError, requestId: string, shape: "openai" | "anthropic" = "openai"): Response {
  const headers: Record<string, string> = { "content-type": "application/json", "x-request-id": requestId, ...error.headers() };
  if (shape === "anthropic") headers["request-id"] = requestId;
  return new Response(JSON.stringify(shape === "anthropic" ? error.toAnthropicBody() : error.toBody()), { status: error.status, headers });
}
