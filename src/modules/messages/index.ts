import { Elysia } from "elysia";
import { SluiceError } from "../../errors";
import { countChatTokens } from "../../tokens/count";
import { textOfContent } from "../../tokens/text";
import { anthropicAuthPlugin, anthropicKey } from "../auth/index";
import type { AuthService } from "../auth/service";
import { answerHandler, readJson, type ChatRouteOptions, type Dialect } from "../chat/index";
import type { ChatService } from "../chat/service";
import type { ModelRegistry } from "../models/registry";
import { messagesFormat } from "./format";
import { countTokensMessages, translateMessagesRequest } from "./model";

/** The routes of the Anthropic Messages API: their errors are written in Anthropic's shape (see createApp). */
export const anthropicPaths: ReadonlySet<string> = new Set(["/v1/messages", "/v1/messages/count_tokens"]);

const messagesDialect: Dialect = {
  key: anthropicKey,
  translate(body) {
    const request = translateMessagesRequest(body);
    return request instanceof SluiceError ? request : { request, format: messagesFormat };
  },
  requestIdHeader: "request-id",
};

/** POST /v1/messages: Anthropic's Messages API, translated onto the chat path. */
export const messagesRoutes = (chat: ChatService, auth: AuthService, options: ChatRouteOptions) =>
  new Elysia({ name: "messages" }).post("/v1/messages", answerHandler(chat, auth, options, messagesDialect), { parse: "none" });

/**
 * POST /v1/messages/count_tokens: the prompt's tokens by Sluice's tokenizer, for a model the caller's plan may use;
 * no quota is taken and no upstream is called.
 */
export const countTokensRoutes = (registry: ModelRegistry, auth: AuthService, maxBodyBytes: number) =>
  new Elysia({ name: "count-tokens" }).use(anthropicAuthPlugin(auth)).post(
    "/v1/messages/count_tokens",
    async ({ caller, request, set }) => {
      const counted = countTokensMessages(await readJson(request, maxBodyBytes));
      if (counted instanceof SluiceError) throw counted;
      registry.visible(caller, counted.model);
      const messages = counted.messages.map((message) => ({
        role: message.role,
        text: textOfContent(message.content) + (message.tool_calls ? JSON.stringify(message.tool_calls) : ""),
      }));
      // Anthropic answers carry the request id as `request-id`; `x-request-id` is kept for Sluice's own tools.
      set.headers["request-id"] = set.headers["x-request-id"] as string;
      return { input_tokens: await countChatTokens(messages) };
    },
    { parse: "none" },
  );
