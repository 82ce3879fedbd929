import { Elysia } from "elysia";
import { SluiceError } from "../../errors";
import { bearerKey } from "../auth/index";
import type { AuthService } from "../auth/service";
import { answerHandler, type ChatRouteOptions, type Dialect } from "../chat/index";
import type { ChatService } from "../chat/service";
import { textCompletionFormat } from "./format";
import { renamedParameters, translateCompletionsRequest } from "./model";

const completionsDialect: Dialect = {
  key: bearerKey,
  translate(body) {
    const request = translateCompletionsRequest(body);
    return request instanceof SluiceError ? request : { request, format: textCompletionFormat };
  },
  renameError(error) {
    const renamed = error.param === null ? undefined : renamedParameters[error.param];
    if (renamed === undefined || error.param === null) return error;
    return new SluiceError(error.code, error.message.replaceAll(error.param, renamed), { param: renamed, cause: error });
  },
};

/**
 * POST /v1/completions: the legacy text completions API, which IDEs' autocomplete speaks (fill-in-the-middle with
 * `suffix`), on the chat path: the same keys, plans, quotas, queue, red-line rules, ledger and metrics; the upstream
 * gets it at its own /completions.
 */
export const completionsRoutes = (chat: ChatService, auth: AuthService, options: ChatRouteOptions) =>
  new Elysia({ name: "completions" }).post("/v1/completions", answerHandler(chat, auth, options, completionsDialect), { parse: "none" });
