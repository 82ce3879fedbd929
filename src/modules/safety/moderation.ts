import { SluiceError } from "../../errors";

function unavailable(reason: string, cause?: unknown): SluiceError {
  return new SluiceError("safety_unavailable", `The red-line check is not answering (${reason}); the request was not processed. Retry shortly.`, {
    retryAfterSeconds: 5,
    cause,
  });
}

/**
 * A client for an external checker in the OpenAI moderation format: POST {model, input}, read
 * results[].flagged and results[].categories. Any failure (error, timeout, nonsense) is 503 safety_unavailable:
 * the check fails closed.
 */
export class ModerationClient {
  constructor(
    private readonly url: string,
    private readonly model: string | undefined,
    private readonly apiKey: string | undefined,
    private readonly timeoutMs: number,
  ) {}

  /** The categories flagged for any of the texts. */
  async flaggedCategories(texts: string[], signal: AbortSignal): Promise<string[]> {
    const headers: Record<string, string> = { "content-type": "application/json" };
    if (this.apiKey) headers.authorization = `Bearer ${this.apiKey}`;
    let response: Response;
    let parsed: unknown;
    try {
      response = await fetch(this.url, {
        method: "POST",
        headers,
        body: JSON.stringify(this.model ? { model: this.model, input: texts } : { input: texts }),
        signal: AbortSignal.any([signal, AbortSignal.timeout(this.timeoutMs)]),
        // Not followed: a check sent on to another address could be answered "nothing flagged" by anyone (a 3xx is
        // not 200, so the check fails closed).
        redirect: "manual",
      });
      if (response.status !== 200) throw unavailable(`HTTP ${response.status}`);
      parsed = await response.json();
    } catch (error) {
      if (error instanceof SluiceError) throw error;
      const timedOut = (error as Error)?.name === "TimeoutError";
      throw unavailable(timedOut ? `no answer within ${this.timeoutMs} ms` : "unreachable or malformed answer", error);
    }
    const results = (parsed as { results?: unknown })?.results;
    if (!Array.isArray(results) || results.length !== texts.length) throw unavailable("answer without one result per input");
    const flagged: string[] = [];
    for (const result of results) {
      const { flagged: isFlagged, categories } = (result ?? {}) as { flagged?: unknown; categories?: unknown };
      if (typeof isFlagged !== "boolean" || typeof categories !== "object" || categories === null) throw unavailable("answer in an unknown format");
      if (!isFlagged) continue;
      for (const [category, value] of Object.entries(categories)) if (value === true) flagged.push(category);
    }
    return flagged;
  }
}
