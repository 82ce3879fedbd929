import { Elysia } from "elysia";
import { SluiceError, invalidRequest } from "../../errors";
import { readBodyText } from "../../http/read-body";
import type { RequestServer } from "../../http/client-address";
import { sseResponse } from "../../http/sse-response";
import { authenticateRequest, bearerKey } from "../auth/index";
import type { AuthService } from "../auth/service";
import type { ModelRegistry } from "../models/registry";
import type { Lifecycle } from "../observability/index";
import { recordOf, type RequestRecord } from "../observability/request-record";
import type { AnswerFormat } from "./format";
import { validateChatRequest, type ChatRequest } from "./model";
import { chatFormat } from "./response";
import type { ChatService } from "./service";

export interface ChatRouteOptions {
  maxBodyBytes: number;
  lifecycle: Lifecycle;
  models: ModelRegistry;
  /** Logs and counts a finished request: these routes do it themselves (see createApp). */
  finish: (record: RequestRecord) => void;
  /** Lifts the connection's idle timeout for this request: reasoning models may think for minutes first. */
  waitWithoutTimeout: (request: Request) => void;
  /** How long a stream may stay silent before an API with a heartbeat event (Anthropic's `ping`) sends one. */
  heartbeatMs: number;
  /** The app's one error mapping (createApp): the handler answers its own failures, so that its promise never rejects. */
  failed: (error: unknown, request: Request) => Response;
}

/** A request of some API translated onto the chat path, and how its answer is written. */
export interface Translation {
  request: ChatRequest;
  format: AnswerFormat;
}

/** An API served by the chat path: how it finds the caller's key and reads its body. */
export interface Dialect {
  /** The caller's key; `Authorization: Bearer` unless the API has its own header. */
  key(request: Request): string | undefined;
  /** Validates a parsed body and translates it; a 400 names the parameter as this API calls it. */
  translate(body: unknown): Translation | SluiceError;
  /** Gives an error raised on the chat path the parameter names this API uses. */
  renameError?(error: SluiceError): SluiceError;
  /** A header of this API's own that carries the request id besides `x-request-id` (Anthropic's `request-id`). */
  requestIdHeader?: string;
}

const chatDialect: Dialect = {
  key: bearerKey,
  translate(body) {
    const request = validateChatRequest(body);
    return request instanceof SluiceError ? request : { request, format: chatFormat };
  },
};

/** Reads a JSON body within the size limit; 400 or 413 in the caller's format otherwise. */
export async function readJson(request: Request, maxBodyBytes: number): Promise<unknown> {
  return parseJson(await readJsonText(request, maxBodyBytes));
}

/** The text of a body that says it is JSON (400 otherwise), within the size limit (413 otherwise). */
function readJsonText(request: Request, maxBodyBytes: number): Promise<string> {
  const contentType = request.headers.get("content-type") ?? "";
  if (!/^application\/([\w.+-]+\+)?json\b/i.test(contentType)) {
    throw invalidRequest(`The Content-Type must be application/json, but got '${contentType || "(none)"}'.`);
  }
  return readBodyText(request, maxBodyBytes);
}

function parseJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    // Malformed, or so deeply nested that parsing ran out of stack: either way not a request we can read.
    throw invalidRequest("We could not parse the JSON body of your request. (The body must be valid JSON.)");
  }
}

/**
 * A request's upstream controller, aborted when the client leaves: it is the listener itself (`handleEvent`), so the
 * request needs no closure for it, and a closure made in the handler would keep the handler's scope (the request, its
 * headers and URL) for as long as a stream lasts (bench/HISTORY.md, "Fewer cells an open stream").
 */
class UpstreamAbort extends AbortController {
  handleEvent(): void {
    this.abort();
  }
}

/**
 * The handler of every route that runs a model: authenticate, read and translate the body, run it on the chat
 * path, answer whole or streamed in the API's format. It does its own authentication and its own log line and
 * metrics rather than through a resolve hook and onAfterResponse: on the hottest route each hook costs Elysia a
 * context property, a setImmediate and a closure per request. It answers its own errors, through the app's one error
 * mapping (`options.failed`), so that Bun's router can call it directly (src/http/answer-routes.ts).
 */
export function answerHandler(chat: ChatService, auth: AuthService, options: ChatRouteOptions, dialect: Dialect) {
  // Needs nothing of a request: made once per route, not once per answer.
  const streamEnded = () => options.lifecycle.openAnswers--;
  return async ({ request, server }: { request: Request; server?: RequestServer }): Promise<Response> => {
    const record = recordOf(request) as RequestRecord;
    const lifecycle = options.lifecycle;
    let opened = false;
    let streaming = false;
    try {
      const authenticated = authenticateRequest(auth, request, server, dialect.key(request));
      const caller = authenticated instanceof Promise ? await authenticated : authenticated;
      if (lifecycle.draining) {
        throw new SluiceError("server_overloaded", "The server is restarting and takes no new requests. Retry shortly.", { retryAfterSeconds: 2 });
      }
      // Not through readJson: an async layer of its own would cost the hottest route a promise and a turn.
      const translation = dialect.translate(parseJson(await readJsonText(request, options.maxBodyBytes)));
      if (translation instanceof SluiceError) throw translation;
      const body = translation.request;
      record.model = options.models.idOf(body.model) ?? "unknown";
      options.waitWithoutTimeout(request);
      const requestId = record.requestId;
      const upstreamAbort = new UpstreamAbort();
      // No `{ once: true }`: a signal aborts once anyway, and the options object cost about 2% of a whole answer's
      // CPU (bench/HISTORY.md, "A switch flipped every 237 ms").
      request.signal.addEventListener("abort", upstreamAbort);
      lifecycle.openAnswers++;
      opened = true;
      const result = await chat.create(body, { caller, requestId, abort: upstreamAbort, record, finish: options.finish }, translation.format);
      // The abort listener stays: once the answer is complete, aborting its controller does nothing.
      if (result.kind === "whole") {
        // The answer's own object (ChatResult): added to, not copied.
        const headers = result.headers;
        headers["content-type"] = "application/json";
        headers["x-request-id"] = requestId;
        if (dialect.requestIdHeader) headers[dialect.requestIdHeader] = requestId;
        const response = new Response(result.body, { headers });
        options.finish(record);
        return response;
      }
      streaming = true;
      const heartbeat = translation.format.heartbeat;
      const headers = result.headers;
      headers["x-request-id"] = requestId;
      if (dialect.requestIdHeader) headers[dialect.requestIdHeader] = requestId;
      return sseResponse(result.answer, {
        headers,
        upstream: upstreamAbort,
        onEnd: streamEnded,
        heartbeat: heartbeat === undefined ? undefined : { frame: heartbeat, intervalMs: options.heartbeatMs },
      });
    } catch (error) {
      // Errors of the chat path name parameters as Chat Completions does: the dialect renames them to its own.
      return options.failed(opened && error instanceof SluiceError && dialect.renameError ? dialect.renameError(error) : error, request);
    } finally {
      if (opened && !streaming) lifecycle.openAnswers--;
    }
  };
}

/** POST /v1/chat/completions. */
export const chatRoutes = (chat: ChatService, auth: AuthService, options: ChatRouteOptions) =>
  new Elysia({ name: "chat" }).post("/v1/chat/completions", answerHandler(chat, auth, options, chatDialect), { parse: "none" });
