import { Elysia } from "elysia";
import type { ModelConfig } from "../../config/schema";
import { invalidRequest } from "../../errors";
import { anthropicAuthPlugin } from "../auth/index";
import type { AuthService } from "../auth/service";
import type { ModelRegistry } from "./registry";

/** The model id of a path, percent-decoded; a path that does not decode (a lone `%`) names the model as written. */
function modelIdOf(path: string): string {
  try {
    return decodeURIComponent(path);
  } catch {
    return path;
  }
}

/**
 * Whether a request to the model routes comes from Anthropic's clients, which send `anthropic-version` on every
 * request (OpenAI's never do): it is answered, errors included, in Anthropic's shapes.
 */
export function asksAnthropicShape(request: Request): boolean {
  return request.headers.has("anthropic-version");
}

function modelBody(model: ModelConfig, created: number) {
  return { id: model.id, object: "model" as const, created, owned_by: model.ownedBy };
}

/** Anthropic's ModelInfo: the id is also the display name; the limits are the model's own. */
function anthropicModelBody(model: ModelConfig, created: number) {
  return {
    type: "model" as const,
    id: model.id,
    display_name: model.id,
    created_at: new Date(created * 1000).toISOString(),
    max_input_tokens: model.contextWindow,
    max_tokens: model.maxOutputTokens,
  };
}

/** Anthropic's page of models: `limit` (1 to 1000, 20 by default), after `after_id` or before `before_id`. */
function anthropicPage(models: ModelConfig[], query: Record<string, string | undefined>, created: number) {
  const limit = query.limit === undefined ? 20 : Number(query.limit);
  if (!Number.isInteger(limit) || limit < 1 || limit > 1000) throw invalidRequest("limit: must be a whole number from 1 to 1000.", "limit");
  if (query.after_id !== undefined && query.before_id !== undefined) throw invalidRequest("Give after_id or before_id, not both.", "after_id");
  const cursor = query.after_id ?? query.before_id;
  const at = cursor === undefined ? -1 : models.findIndex((model) => model.id === cursor);
  if (cursor !== undefined && at === -1) throw invalidRequest(`${query.after_id !== undefined ? "after_id" : "before_id"}: no model "${cursor}" in the list.`);
  const page = query.before_id !== undefined ? models.slice(Math.max(0, at - limit), at) : models.slice(at + 1, at + 1 + limit);
  const more = query.before_id !== undefined ? at - limit > 0 : at + 1 + limit < models.length;
  return { data: page.map((model) => anthropicModelBody(model, created)), first_id: page[0]?.id ?? null, last_id: page.at(-1)?.id ?? null, has_more: more };
}

/**
 * GET /v1/models and GET /v1/models/{model}: the enabled models of the caller's plan (and of its key's own list), in
 * OpenAI's shapes, or in Anthropic's for Anthropic's clients (see asksAnthropicShape), whose key comes in `x-api-key`.
 */
export const modelRoutes = (registry: ModelRegistry, auth: AuthService) =>
  new Elysia({ name: "models" })
    .use(anthropicAuthPlugin(auth))
    .get("/v1/models", ({ caller, request, query }) => {
      const models = registry.listFor(caller);
      if (asksAnthropicShape(request)) return anthropicPage(models, query, registry.created);
      return { object: "list" as const, data: models.map((model) => modelBody(model, registry.created)) };
    })
    .get("/v1/models/*", ({ caller, params, request }) => {
      const name = modelIdOf(params["*"]);
      const found = registry.visible(caller, name);
      // A name under a prefix model's prefix is a model of its own to the caller.
      const model = found.prefix === undefined ? found : { ...found, id: name };
      return asksAnthropicShape(request) ? anthropicModelBody(model, registry.created) : modelBody(model, registry.created);
    });
