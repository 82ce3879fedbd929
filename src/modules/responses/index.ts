import { Elysia } from "elysia";
import { SluiceError } from "../../errors";
import { bearerKey } from "../auth/index";
import type { AuthService } from "../auth/service";
import { answerHandler, type ChatRouteOptions, type Dialect } from "../chat/index";
import type { ChatService } from "../chat/service";
import { responsesFormat } from "./format";
import { renamedParameters, translateResponsesRequest } from "./model";

const responsesDialect: Dialect = {
  key: bearerKey,
  translate(body) {
    const translated = translateResponsesRequest(body);
    if (translated instanceof SluiceError) return translated;
    return { request: translated.request, format: responsesFormat(translated.original) };
  },
  renameError(error) {
    const renamed = error.param === null ? undefined : renamedParameters[error.param];
    if (renamed === undefined || error.param === null) return error;
    return new SluiceError(error.code, error.message.replaceAll(error.param, renamed), { param: renamed, cause: error });
  },
};

/** POST /v1/responses: OpenAI's Responses API, stateless, translated onto the chat path. */
export const responsesRoutes = (chat: ChatService, auth: AuthService, options: ChatRouteOptions) =>
  new Elysia({ name: "responses" }).post("/v1/responses", answerHandler(chat, auth, options, responsesDialect), { parse: "none" });
