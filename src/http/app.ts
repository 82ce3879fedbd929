import { Elysia } from "elysia";
import type { AuthService } from "../modules/auth/service";
import { chatRoutes } from "../modules/chat/index";
import type { ChatService } from "../modules/chat/service";
import { modelRoutes } from "../modules/models/index";
import type { ModelRegistry } from "../modules/models/registry";
import { newRequestId } from "../ids";
import { ClientGoneError } from "../upstream/errors";
import { errorResponse, toSluiceError } from "./error-response";
import { openApiDocument } from "./openapi";

export interface AppDependencies {
  auth: AuthService;
  models: ModelRegistry;
  chat: ChatService;
  maxBodyBytes: number;
}

/** Composes the feature plugins into the HTTP application; every error leaves through one mapping. */
export function createApp(deps: AppDependencies) {
  return new Elysia({ name: "sluice" })
    .onRequest(({ set }) => {
      set.headers["x-request-id"] = newRequestId();
    })
    .onError(({ error, code, set, request }) => {
      const requestId = (set.headers["x-request-id"] as string | undefined) ?? newRequestId();
      const sluiceError = toSluiceError(error, code, request.method, new URL(request.url).pathname);
      // A caller who left gets no answer; that is not a server fault worth logging.
      if (sluiceError.code === "internal_error" && !(error instanceof ClientGoneError)) {
        console.error(JSON.stringify({ level: "error", request_id: requestId, message: String((error as Error)?.stack ?? error) }));
      }
      return errorResponse(sluiceError, requestId);
    })
    .get("/openapi.json", () => openApiDocument)
    .get("/healthz", () => ({ status: "ok" }))
    .use(modelRoutes(deps.models, deps.auth))
    .use(chatRoutes(deps.chat, deps.auth, { maxBodyBytes: deps.maxBodyBytes }));
}

export type App = ReturnType<typeof createApp>;
