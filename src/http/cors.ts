// Cross-origin requests to the API from web pages (SLUICE_CORS_ORIGINS): a browser's preflight answered, and every
// answer of the API marked readable by the pages of the origins allowed. Off unless set: most callers are programs,
// which need none of it, and a page that holds a key is a page that can leak it.

/** The headers of an answer a page may read besides the simple ones: the request id, retries, and rate limits. */
const exposedHeaders = [
  "x-request-id",
  "request-id",
  "retry-after",
  "retry-after-ms",
  "x-should-retry",
  "x-ratelimit-limit-requests",
  "x-ratelimit-limit-tokens",
  "x-ratelimit-remaining-requests",
  "x-ratelimit-remaining-tokens",
  "x-ratelimit-reset-requests",
  "x-ratelimit-reset-tokens",
].join(", ");

/** A list of header names, as a preflight asks for them (the SDKs send their own `x-stainless-*` and `anthropic-*`). */
const headerList = /^[A-Za-z0-9!#$%&'*+.^_`|~-]+(?:\s*,\s*[A-Za-z0-9!#$%&'*+.^_`|~-]+)*$/;
const maxRequestedHeaders = 4096;

/** How long a browser may keep a preflight's answer, in seconds. */
const preflightMaxAgeSeconds = 600;

/** `*`, or origins as a browser writes them (`https://app.example.com`, `http://localhost:3000`); `wrong` names any other entry. */
export function parseOrigins(written: string): { any: boolean; origins: string[] } | { wrong: string } {
  const entries = [...new Set(written.split(",").map((entry) => entry.trim()))];
  if (entries.includes("*")) return entries.length === 1 ? { any: true, origins: [] } : { wrong: "*" };
  for (const entry of entries) {
    let origin: string | undefined;
    try {
      origin = new URL(entry).origin;
    } catch {
      origin = undefined;
    }
    if (origin !== entry || !/^https?:/.test(entry)) return { wrong: entry };
  }
  return { any: false, origins: entries };
}

/** The API's cross-origin policy: which pages may call it. Each origin's headers are made once, at start. */
export class Cors {
  private readonly any: Readonly<Record<string, string>> | undefined;
  private readonly byOrigin: ReadonlyMap<string, Readonly<Record<string, string>>>;
  /** For a page of an origin not named: the answer depends on the origin, so caches must key on it. */
  private readonly refused: Readonly<Record<string, string>> = Object.freeze({ vary: "Origin" });

  constructor(
    /** Any origin (`*`): the API's answers carry no cookies or other credentials, so a wildcard gives away nothing more. */
    any: boolean,
    origins: readonly string[],
  ) {
    this.any = any ? Object.freeze({ "access-control-allow-origin": "*", "access-control-expose-headers": exposedHeaders }) : undefined;
    this.byOrigin = new Map(
      origins.map((origin) => [
        origin,
        Object.freeze({ "access-control-allow-origin": origin, "access-control-expose-headers": exposedHeaders, vary: "Origin" }),
      ]),
    );
  }

  /** The headers an answer to this request carries: the origin and what it may read when allowed; `Vary` otherwise. */
  headersFor(request: Request): Readonly<Record<string, string>> {
    if (this.any) return this.any;
    const origin = request.headers.get("origin");
    return (origin !== null && this.byOrigin.get(origin)) || this.refused;
  }

  /** Adds the headers to an answer made elsewhere (the answer routes that Bun's router serves). */
  decorate(request: Request, response: Response): Response {
    const headers = this.headersFor(request);
    for (const name in headers) response.headers.set(name, headers[name] as string);
    return response;
  }

  /**
   * The answer to a browser's preflight (`OPTIONS`): 204, with the methods and the headers the page asked for when
   * its origin is allowed, and without them (so the browser refuses the call) when it is not.
   */
  preflight(request: Request): Response {
    const headers = { ...this.headersFor(request) };
    if (headers["access-control-allow-origin"] !== undefined) {
      headers["access-control-allow-methods"] = "GET, POST, OPTIONS";
      const asked = request.headers.get("access-control-request-headers")?.trim();
      if (asked && asked.length <= maxRequestedHeaders && headerList.test(asked)) headers["access-control-allow-headers"] = asked;
      headers["access-control-max-age"] = String(preflightMaxAgeSeconds);
    }
    return new Response(null, { status: 204, headers });
  }
}
