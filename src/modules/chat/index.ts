import { Elysia } from "elysia";
import { SluiceError, invalidRequest } from "../../errors";
import { sseResponse } from "../../http/sse-response";
import { authenticateRequest } from "../auth/index";
import type { AuthService } from "../auth/service";
import type { ModelRegistry } from "../models/registry";
import type { Lifecycle } from "../observability/index";
import { recordOf, type RequestRecord } from "../observability/request-record";
import { validateChatRequest } from "./model";
import type { ChatService } from "./service";

export interface ChatRouteOptions {
  maxBodyBytes: number;
  lifecycle: Lifecycle;
  models: ModelRegistry;
  /** Logs and counts a finished request: this route does it itself (see createApp). */
  finish: (record: RequestRecord) => void;
  /** Lifts the connection's idle timeout for this request: reasoning models may think for minutes first. */
  waitWithoutTimeout: (request: Request) => void;
}

async function readJson(request: Request, maxBodyBytes: number): Promise<unknown> {
  const contentType = request.headers.get("content-type") ?? "";
  if (!/^application\/([\w.+-]+\+)?json\b/i.test(contentType)) {
    throw invalidRequest(`The Content-Type must be application/json, but got '${contentType || "(none)"}'.`);
  }
  const declared = Number(request.headers.get("content-length") ?? 0);
  const tooLarge = () => new SluiceError("request_too_large", `The request body is larger than the limit of ${maxBodyBytes} bytes.`);
  if (declared > maxBodyBytes) throw tooLarge();
  const text = await request.text();
  if (text.length > maxBodyBytes) throw tooLarge();
  try {
    return JSON.parse(text);
  } catch {
    // Malformed, or so deeply nested that parsing ran out of stack: either way not a request we can read.
    throw invalidRequest("We could not parse the JSON body of your request. (The body must be valid JSON.)");
  }
}

/**
 * POST /v1/chat/completions. The route does its own authentication and its own log line and metrics rather than
 * through a resolve hook and onAfterResponse: on the hottest route each hook costs Elysia a context property, a
 * setImmediate and a closure per request. Errors still leave through the app's one error mapping.
 */
export const chatRoutes = (chat: ChatService, auth: AuthService, options: ChatRouteOptions) =>
  new Elysia({ name: "chat" }).post(
    "/v1/chat/completions",
    async ({ request }) => {
      const record = recordOf(request) as RequestRecord;
      const authenticated = authenticateRequest(auth, request);
      const caller = authenticated instanceof Promise ? await authenticated : authenticated;
      if (options.lifecycle.draining) {
        throw new SluiceError("server_overloaded", "The server is restarting and takes no new requests. Retry shortly.", { retryAfterSeconds: 2 });
      }
      const body = validateChatRequest(await readJson(request, options.maxBodyBytes));
      if (body instanceof SluiceError) throw body;
      record.model = options.models.has(body.model) ? body.model : "unknown";
      options.waitWithoutTimeout(request);
      const requestId = record.requestId;
      const upstreamAbort = new AbortController();
      const onClientGone = () => upstreamAbort.abort();
      request.signal.addEventListener("abort", onClientGone, { once: true });
      const lifecycle = options.lifecycle;
      lifecycle.openAnswers++;
      let streaming = false;
      try {
        const result = await chat.create(body, { caller, requestId, abort: upstreamAbort, record, finish: () => options.finish(record) });
        // The abort listener stays: once the answer is complete, aborting its controller does nothing.
        if (result.kind === "whole") {
          const response = new Response(JSON.stringify(result.body), { headers: { ...result.headers, "content-type": "application/json", "x-request-id": requestId } });
          options.finish(record);
          return response;
        }
        streaming = true;
        return sseResponse(result.chunks, onClientGone, { ...result.headers, "x-request-id": requestId }, () => lifecycle.openAnswers--);
      } finally {
        if (!streaming) lifecycle.openAnswers--;
      }
    },
    { parse: "none" },
  );
