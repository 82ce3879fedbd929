import type { Server } from "bun";
import type { AnyElysia } from "elysia";
import { newRequestId } from "../ids";
import { startRecord } from "../modules/observability/request-record";
import type { Cors } from "./cors";
import type { TraceContext } from "../tracing/trace-context";

type AnswerHandler = (context: { request: Request; server: Server<unknown> }) => Promise<Response>;
/** What a route of Bun's own router runs: a handler that takes the request and its server. */
export type NativeRoutes = Record<string, { POST: (request: Request, server: Server<unknown>) => Promise<Response> }>;

/**
 * The routes that run a model, served by Bun's own router with the handler their plugin declared, rather than through
 * the handler Elysia compiles around it: Elysia's context, request hook and response mapping cost about 4% of a whole
 * answer's CPU (bench/HISTORY.md, "A switch flipped every 237 ms"). Elysia still serves everything else, and these paths
 * in any other form (another method, a trailing slash, `app.handle`), with the same handlers, which answer their own
 * errors through the app's one error mapping.
 */
export function nativeAnswerRoutes(
  app: AnyElysia,
  paths: Iterable<string>,
  options: {
    traceOf: (headers: Headers) => TraceContext | undefined;
    /** Which web pages may call the API (SLUICE_CORS_ORIGINS). */
    cors?: Cors;
    /** Every request's caller's address, for its log line (SLUICE_LOG_CLIENT_IP). */
    addressOf?: (request: Request, server: Server<unknown>) => string | undefined;
  },
): NativeRoutes {
  const { traceOf, cors, addressOf } = options;
  const routes: NativeRoutes = {};
  for (const path of paths) {
    const route = app.routes.find((candidate) => candidate.method === "POST" && candidate.path === path);
    if (!route) throw new Error(`no POST ${path} route to serve natively`);
    const handler = route.handler as unknown as AnswerHandler;
    const post = (request: Request, server: Server<unknown>) => {
      // Elysia's request hook does this for the routes it serves (createApp).
      const record = startRecord(request, newRequestId(), path);
      record.trace = traceOf(request.headers);
      if (addressOf) record.clientAddress = addressOf(request, server);
      // Never rejects: the handler answers its own errors (answerHandler).
      return handler({ request, server });
    };
    // Chosen once: without SLUICE_CORS_ORIGINS an answer pays for nothing. A preflight (OPTIONS) goes on to Elysia.
    routes[path] = { POST: cors ? async (request, server) => cors.decorate(request, await post(request, server)) : post };
  }
  return routes;
}
