import { Elysia } from "elysia";
import { newRequestId } from "../ids";
import type { AuthService } from "../modules/auth/service";
import { chatRoutes, type ChatRouteOptions } from "../modules/chat/index";
import type { AccountService } from "../modules/console/accounts";
import { consolePageRoutes, consoleRoutes, securityHeaders } from "../modules/console/index";
import type { ConsoleService } from "../modules/console/service";
import type { ChatService } from "../modules/chat/service";
import { anthropicPaths, countTokensRoutes, messagesRoutes } from "../modules/messages/index";
import { asksAnthropicShape, modelRoutes } from "../modules/models/index";
import { responsesRoutes } from "../modules/responses/index";
import { completionsRoutes } from "../modules/completions/index";
import { embeddingsRoutes } from "../modules/embeddings/index";
import type { EmbeddingsService } from "../modules/embeddings/service";
import type { ModelRegistry } from "../modules/models/registry";
import { finishRecord, observabilityRoutes, type Lifecycle } from "../modules/observability/index";
import type { Logger } from "../modules/observability/logger";
import type { Metrics } from "../modules/observability/metrics";
import { recordOf, startRecord, type RequestRecord } from "../modules/observability/request-record";
import type { Tracer } from "../tracing/tracer";
import { ClientGoneError } from "../errors";
import { nativeAnswerRoutes } from "./answer-routes";
import type { Cors } from "./cors";
import { errorResponse, toSluiceError } from "./error-response";
import { openApiDocument } from "./openapi";

export interface AppDependencies {
  console: { service: ConsoleService; accounts: AccountService };
  auth: AuthService;
  models: ModelRegistry;
  chat: ChatService;
  embeddings: EmbeddingsService;
  maxBodyBytes: number;
  /** How long an Anthropic stream may stay silent before a `ping`. */
  heartbeatMs: number;
  metrics: Metrics;
  logger: Logger;
  /** What stops this instance from serving (database, Redis), for /readyz. */
  readiness: () => Promise<string[]>;
  lifecycle: Lifecycle;
  metricsToken: string | undefined;
  tracer: Tracer;
  /** Which web pages may call the API; none when unset. */
  cors?: Cors;
  /** Every request's record notes its caller's address, for its log line (SLUICE_LOG_CLIENT_IP). */
  logClientAddresses?: boolean;
}

/** The routes that run a model: each logs and counts its own requests (see below). */
const answerRoutes = new Set(["/v1/chat/completions", "/v1/responses", "/v1/messages", "/v1/completions"]);
/** The routes whose requests are traced: those that run a model. */
const tracedRoutes = new Set([...answerRoutes, "/v1/embeddings"]);
const knownRoutes = new Set([...tracedRoutes, "/v1/messages/count_tokens", "/v1/models", "/openapi.json", "/healthz", "/readyz", "/metrics"]);

/** Whether a route's errors take Anthropic's shape: its own routes, and the model routes when Anthropic's clients ask. */
function answersAnthropic(route: string, request: Request): boolean {
  return anthropicPaths.has(route) || ((route === "/v1/models" || route === "/v1/models/{model}") && asksAnthropicShape(request));
}

/** The route label of a path; anything else is "other", so that metrics cannot grow without bound. */
function routeOf(url: string): string {
  const start = url.indexOf("/", url.indexOf("//") + 2);
  const end = url.indexOf("?", start);
  const path = end === -1 ? url.slice(start) : url.slice(start, end);
  if (knownRoutes.has(path)) return path;
  return path.startsWith("/v1/models/") ? "/v1/models/{model}" : "other";
}

/** Composes the feature plugins into the HTTP application; every error leaves through one mapping. */
export function createApp(deps: AppDependencies) {
  // Decided as the request's record starts, before anything can refuse it, so that a refusal has its span too.
  const traceOf = (headers: Headers) => deps.tracer.contextOf(headers);
  const finish = (record: RequestRecord) => finishRecord(record, deps.metrics, deps.logger);
  /** The one mapping of every error to its response, logged and counted; `code` is Elysia's name for it. */
  const failed = (error: unknown, code: string | number, request: Request): Response => {
    const record = recordOf(request);
    const requestId = record?.requestId ?? newRequestId();
    const sluiceError = toSluiceError(error, code, request.method, new URL(request.url).pathname);
    if (record) {
      record.status = sluiceError.status;
      record.code = sluiceError.code;
      record.deferred = false;
      // The answer routes have no onAfterResponse (see below): their failures are logged here.
      if (answerRoutes.has(record.route)) finish(record);
    }
    // A caller who left gets no answer; that is not a server fault worth logging.
    if (sluiceError.code === "internal_error" && !(error instanceof ClientGoneError)) {
      deps.logger.log("error", { message: "internal error", request_id: requestId, error: String((error as Error)?.stack ?? error) });
    }
    return errorResponse(sluiceError, requestId, record && answersAnthropic(record.route, request) ? "anthropic" : "openai");
  };
  const answerOptions: ChatRouteOptions = {
    maxBodyBytes: deps.maxBodyBytes,
    lifecycle: deps.lifecycle,
    finish,
    models: deps.models,
    heartbeatMs: deps.heartbeatMs,
    failed: (error, request) => failed(error, "UNKNOWN", request),
    waitWithoutTimeout: (request: Request): void => {
      app.server?.timeout(request, 0);
    },
  };
  const app = new Elysia({ name: "sluice" })
    .onRequest(({ request, server, set }) => {
      if (deps.cors && new URL(request.url).pathname.startsWith("/v1/")) {
        if (request.method === "OPTIONS") return deps.cors.preflight(request);
        Object.assign(set.headers, deps.cors.headersFor(request));
      }
      const requestId = newRequestId();
      const route = routeOf(request.url);
      const record = startRecord(request, requestId, route);
      if (tracedRoutes.has(route)) record.trace = traceOf(request.headers);
      if (deps.logClientAddresses) record.clientAddress = deps.auth.addresses.of(request, server);
      // Answers carry the id in their own Response (and errors in errorResponse): a header in `set` would make
      // Elysia copy the whole Response to merge it in, on every answer.
      if (!answerRoutes.has(route)) Object.assign(set.headers, securityHeaders, { "x-request-id": requestId });
    })
    .onError(({ error, code, request }) => failed(error, code, request))
    // Mounted before onAfterResponse, so that the hottest routes pay for no hook they do not need: they log and
    // count their own requests (hooks apply to the routes registered after them).
    .use(chatRoutes(deps.chat, deps.auth, answerOptions))
    .use(responsesRoutes(deps.chat, deps.auth, answerOptions))
    .use(messagesRoutes(deps.chat, deps.auth, answerOptions))
    .use(completionsRoutes(deps.chat, deps.auth, answerOptions))
    .onAfterResponse(({ request, set }) => {
      const record = recordOf(request);
      if (!record || record.deferred) return;
      record.status ??= typeof set.status === "number" ? set.status : 200;
      finish(record);
    })
    .get("/openapi.json", () => openApiDocument)
    .use(observabilityRoutes({ metrics: deps.metrics, readiness: deps.readiness, lifecycle: deps.lifecycle, metricsToken: deps.metricsToken }))
    .use(consoleRoutes(deps.console.service, deps.console.accounts, deps.auth.addresses))
    .use(modelRoutes(deps.models, deps.auth))
    .use(countTokensRoutes(deps.models, deps.auth, deps.maxBodyBytes))
    .use(embeddingsRoutes(deps.embeddings, deps.auth, { models: deps.models, maxBodyBytes: deps.maxBodyBytes, lifecycle: deps.lifecycle }))
    .use(consolePageRoutes(deps.console.service, deps.auth.addresses));
  // Read by Elysia's Bun adapter when the app listens: Bun's router takes these before Elysia's own.
  app.config.serve = {
    ...app.config.serve,
    routes: nativeAnswerRoutes(app, answerRoutes, {
      traceOf,
      cors: deps.cors,
      addressOf: deps.logClientAddresses ? (request, server) => deps.auth.addresses.of(request, server) : undefined,
    }),
  };
  return app;
}
