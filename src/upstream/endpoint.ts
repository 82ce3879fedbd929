import type { ModelConfig } from "../config/schema";

/**
 * An upstream route under a model's base URL, its query kept: Azure OpenAI's deployments take the API version as
 * `?api-version=…`, which must follow the path, not precede it.
 */
export function upstreamUrl(baseUrl: string, path: string): string {
  const url = new URL(baseUrl);
  url.pathname = `${url.pathname.replace(/\/+$/, "")}${path}`;
  return url.href;
}

/** `path` from the server's root, with `baseUrl`'s host and query: where a health check asks (`/health`). */
export function serverRootUrl(baseUrl: string, path: string): string {
  const url = new URL(baseUrl);
  url.pathname = path;
  return url.href;
}

/**
 * The headers every call to a model's servers carries besides the request's own: the model's `headers`, and its key,
 * as `Authorization: Bearer …` or, when the model names `api_key_header` (Azure OpenAI's `api-key`), as that
 * header's bare value.
 */
export function accessHeaders(model: Pick<ModelConfig, "headers" | "apiKeyHeader">, apiKey: string | undefined): Record<string, string> {
  const headers = { ...model.headers };
  if (apiKey) {
    if (model.apiKeyHeader) headers[model.apiKeyHeader] = apiKey;
    else headers.authorization = `Bearer ${apiKey}`;
  }
  return headers;
}
