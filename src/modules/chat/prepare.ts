import type { ModelConfig } from "../../config/schema";
import { invalidRequest, SluiceError, UpstreamError } from "../../errors";
import { chatTokensUpperBound, countChatTokens, type CountableMessage } from "../../tokens/count";
import { textOfContent } from "../../tokens/text";
import { affinityOf } from "../../upstream/affinity";
import type { ModelEntry } from "../models/registry";
import { forwardedFields, textPromptOf, type ChatRequest } from "./model";

/** The spec's default output limit (section 8). */
export const defaultMaxTokens = 8192;

/** A validated request, checked against its model and ready to send upstream. */
export interface PreparedRequest {
  entry: ModelEntry;
  /** The model's id in the configuration (metrics and queues use it). */
  modelId: string;
  /**
   * The name the caller used (the id, an alias, or a name under a prefix model's prefix), or a fallback's id; answers
   * carry it, not the upstream's name.
   */
  modelName: string;
  /** The model the ledger records (see ledgerModelOf). */
  ledgerModel: string;
  stream: boolean;
  includeUsage: boolean;
  messages: CountableMessage[];
  /** Exact prompt tokens when the context check needed them; counted later otherwise. */
  promptTokens: number | undefined;
  maxTokens: number;
  upstreamBody: Record<string, unknown>;
  /** The conversation as a number, for a model that routes its calls by it (routing = "affinity"). */
  affinity: number | undefined;
  /** A legacy text completion (POST /v1/completions): `upstreamBody` holds a prompt for the upstream's /completions. */
  textCompletion: boolean;
}

/** The model name an upstream is sent: the configured one, or for a prefix model what the caller asked for after the prefix. */
export function upstreamNameOf(model: ModelConfig, asked: string): string {
  return model.prefix === undefined ? model.upstreamModel : asked.slice(model.prefix.length);
}

/** The model a ledger row names: the id, or for a prefix model the whole name asked for (usage by each of its models). */
export function ledgerModelOf(model: ModelConfig, asked: string): string {
  return model.prefix === undefined ? model.id : asked;
}

/** 400 for a request that leaves no room in its model's context window: a context fallback may take it. */
class ContextTooLong extends SluiceError {}

function contextTooLong(model: ModelConfig, promptTokens: number, completionTokens: number) {
  return new ContextTooLong(
    "invalid_request",
    `This model's maximum context length is ${model.contextWindow} tokens. However, you requested ` +
      `${promptTokens + completionTokens} tokens (${promptTokens} in the messages, ${completionTokens} in the completion). ` +
      "Please reduce the length of the messages or completion.",
    { param: "messages" },
  );
}

/** Whether a failure says the request is too long for its model: Sluice's own count, or the upstream's 400 saying so. */
export function isContextTooLong(error: unknown): boolean {
  return error instanceof ContextTooLong || (error instanceof UpstreamError && error.code === "invalid_request" && error.param === "messages");
}

/**
 * Checks the output limit and the context window, and builds the upstream body. Tokenizes the prompt only
 * when a cheap upper bound (its UTF-8 bytes) does not already prove that it fits: only then is the answer a promise
 * (the tokenizer counts on its own thread), so that most requests pay for no await here.
 */
export function prepareRequest(request: ChatRequest, entry: ModelEntry): PreparedRequest | Promise<PreparedRequest> {
  const model = entry.config;
  if (request.n !== undefined && request.n !== 1) throw invalidRequest("Only n = 1 is supported.", "n");
  if (request.max_tokens !== undefined && request.max_completion_tokens !== undefined && request.max_tokens !== request.max_completion_tokens) {
    throw invalidRequest("max_tokens and max_completion_tokens mean the same; send one, or the same value in both.", "max_completion_tokens");
  }
  const limitName = request.max_completion_tokens !== undefined ? "max_completion_tokens" : "max_tokens";
  const requested = request.max_completion_tokens ?? request.max_tokens;
  if (requested !== undefined && requested > model.maxOutputTokens) {
    throw invalidRequest(`${limitName} is too large: ${requested}. This model supports at most ${model.maxOutputTokens} completion tokens.`, limitName);
  }
  const messages = request.messages.map((message) => ({ role: message.role, text: textOfContent(message.content) }));
  const wanted = requested ?? Math.min(defaultMaxTokens, model.maxOutputTokens);
  if (chatTokensUpperBound(messages) + wanted <= model.contextWindow) return prepared(request, entry, messages, limitName, undefined, wanted);
  return countChatTokens(messages).then((promptTokens) => {
    if (promptTokens >= model.contextWindow) throw contextTooLong(model, promptTokens, requested ?? 0);
    if (requested !== undefined && promptTokens + requested > model.contextWindow) throw contextTooLong(model, promptTokens, requested);
    return prepared(request, entry, messages, limitName, promptTokens, Math.min(wanted, model.contextWindow - promptTokens));
  });
}

/** The prepared request, its output limit sent upstream under the name the caller used, or the one the model's configuration names. */
function prepared(
  request: ChatRequest,
  entry: ModelEntry,
  messages: CountableMessage[],
  limitName: "max_tokens" | "max_completion_tokens",
  promptTokens: number | undefined,
  maxTokens: number,
): PreparedRequest {
  const model = entry.config;
  const stream = request.stream === true;
  const text = textPromptOf(request);
  // A text completion goes to the upstream's /completions, whose limit is always max_tokens.
  const upstreamModel = upstreamNameOf(model, request.model);
  const upstreamBody: Record<string, unknown> = text
    ? { model: upstreamModel, prompt: text.prompt, max_tokens: maxTokens, ...text.fields }
    : { model: upstreamModel, messages: request.messages, [model.maxTokensField ?? limitName]: maxTokens };
  if (stream) {
    upstreamBody.stream = true;
    upstreamBody.stream_options = { include_usage: true };
  }
  if (request.temperature !== undefined) upstreamBody.temperature = request.temperature;
  if (request.top_p !== undefined) upstreamBody.top_p = request.top_p;
  if (text === undefined) {
    const raw = request as Record<string, unknown>;
    for (const field of forwardedFields) if (raw[field] !== undefined) upstreamBody[field] = raw[field];
  }
  return {
    entry,
    modelId: model.id,
    // A fallback answers under its own id: the caller learns which model answered.
    // A prefix model is never a fallback (the configuration refuses it), so a request it takes asked for a name under it.
    modelName: model.prefix !== undefined || request.model === model.id || model.aliases.includes(request.model) ? request.model : model.id,
    ledgerModel: ledgerModelOf(model, request.model),
    stream,
    includeUsage: request.stream_options?.include_usage === true,
    messages,
    promptTokens,
    maxTokens,
    upstreamBody,
    affinity: model.routing === "affinity" && model.baseUrls.length > 1 ? affinityOf(request.prompt_cache_key, messages) : undefined,
    textCompletion: text !== undefined,
  };
}
