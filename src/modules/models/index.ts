import { Elysia } from "elysia";
import type { ModelConfig } from "../../config/schema";
import { authPlugin } from "../auth/index";
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

function modelBody(model: ModelConfig, created: number) {
  return { id: model.id, object: "model" as const, created, owned_by: model.ownedBy };
}

/** GET /v1/models and GET /v1/models/{model}: the enabled models of the caller's plan (and of its key's own list). */
export const modelRoutes = (registry: ModelRegistry, auth: AuthService) =>
  new Elysia({ name: "models" })
    .use(authPlugin(auth))
    .get("/v1/models", ({ caller }) => ({
      object: "list" as const,
      data: registry.listFor(caller).map((model) => modelBody(model, registry.created)),
    }))
    .get("/v1/models/*", ({ caller, params }) => modelBody(registry.visible(caller, modelIdOf(params["*"])), registry.created));
