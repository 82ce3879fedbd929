import { Elysia } from "elysia";
import { SluiceError, invalidRequest } from "../../errors";
import { sseResponse } from "../../http/sse-response";
import { authPlugin } from "../auth/index";
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
  /** Logs and counts a request whose end came after its response started (a stream). */
  finish: (record: RequestRecord) => void;
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

/** POST /v1/chat/completions. */
export const chatRoutes = (chat: ChatService, auth: AuthService, options: ChatRouteOptions) =>
  new Elysia({ name: "chat" })
    .use(authPlugin(auth))
    .post(
      "/v1/chat/completions",
      async ({ caller, request, server }) => {
        if (options.lifecycle.draining) {
          throw new SluiceError("server_overloaded", "The server is restarting and takes no new requests. Retry shortly.", { retryAfterSeconds: 2 });
        }
        const body = validateChatRequest(await readJson(request, options.maxBodyBytes));
        if (body instanceof SluiceError) throw body;
        const record = recordOf(request) as RequestRecord;
        record.model = options.models.has(body.model) ? body.model : "unknown";
        // Reasoning models may think for minutes before the first byte; the idle timeout must not cut them off.
        server?.timeout(request, 0);
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
            return new Response(JSON.stringify(result.body), { headers: { ...result.headers, "content-type": "application/json", "x-request-id": requestId } });
          }
          streaming = true;
          return sseResponse(result.chunks, onClientGone, { ...result.headers, "x-request-id": requestId }, () => lifecycle.openAnswers--);
        } finally {
          if (!streaming) lifecycle.openAnswers--;
        }
      },
      { parse: "none" },
    );
