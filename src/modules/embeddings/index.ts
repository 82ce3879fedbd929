import { Elysia } from "elysia";
import { SluiceError } from "../../errors";
import { authPlugin } from "../auth/index";
import type { AuthService } from "../auth/service";
import { readJson } from "../chat/index";
import type { ModelRegistry } from "../models/registry";
import type { Lifecycle } from "../observability/index";
import { recordOf } from "../observability/request-record";
import { validateEmbeddingsRequest } from "./model";
import type { EmbeddingsService } from "./service";

/** POST /v1/embeddings: OpenAI's embeddings, through the caller's plan and quotas (see EmbeddingsService). */
export const embeddingsRoutes = (
  service: EmbeddingsService,
  auth: AuthService,
  options: { models: ModelRegistry; maxBodyBytes: number; lifecycle: Lifecycle },
) =>
  new Elysia({ name: "embeddings" }).use(authPlugin(auth)).post(
    "/v1/embeddings",
    async ({ caller, request }) => {
      const { lifecycle } = options;
      if (lifecycle.draining) {
        throw new SluiceError("server_overloaded", "The server is restarting and takes no new requests. Retry shortly.", { retryAfterSeconds: 2 });
      }
      const body = validateEmbeddingsRequest(await readJson(request, options.maxBodyBytes));
      if (body instanceof SluiceError) throw body;
      const record = recordOf(request);
      if (record) record.model = options.models.idOf(body.model) ?? "unknown";
      const abort = new AbortController();
      request.signal.addEventListener("abort", () => abort.abort(), { once: true });
      // A stop waits for it, as for answers.
      lifecycle.openAnswers++;
      try {
        const { body: answer, headers } = await service.create(body, { caller, requestId: record?.requestId ?? "", abort, record });
        headers["content-type"] = "application/json";
        return new Response(answer, { headers });
      } finally {
        lifecycle.openAnswers--;
      }
    },
    { parse: "none" },
  );
