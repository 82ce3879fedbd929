import { Type, type Static } from "@sinclair/typebox";
import { SluiceError, invalidRequest, missingParameter } from "../../errors";
import { validateBody } from "../../validation";
import type { ChatMessage, ChatRequest } from "../chat/model";

const Part = Type.Object({ type: Type.String({ minLength: 1 }) }, { additionalProperties: true });

const InputItem = Type.Object(
  {
    type: Type.Optional(Type.String({ minLength: 1 })),
    role: Type.Optional(Type.String({ minLength: 1 })),
    content: Type.Optional(Type.Union([Type.String(), Type.Array(Part)], { expected: "a string or an array of content parts" })),
  },
  { additionalProperties: true },
);

/** The fields of OpenAI's `POST /v1/responses` that Sluice reads; others are ignored. */
export const ResponsesRequestSchema = Type.Object(
  {
    model: Type.String({ minLength: 1 }),
    input: Type.Optional(Type.Union([Type.String(), Type.Array(InputItem)], { expected: "a string or an array of input items" })),
    instructions: Type.Optional(Type.String()),
    tools: Type.Optional(Type.Array(Type.Object({ type: Type.String({ minLength: 1 }) }, { additionalProperties: true }))),
    tool_choice: Type.Optional(
      Type.Union([Type.String({ minLength: 1 }), Type.Object({ type: Type.String({ minLength: 1 }) }, { additionalProperties: true })], {
        expected: "a string or an object",
      }),
    ),
    parallel_tool_calls: Type.Optional(Type.Boolean()),
    max_output_tokens: Type.Optional(Type.Integer({ minimum: 1, description: "Output limit, reasoning included. Default 8192" })),
    temperature: Type.Optional(Type.Number({ minimum: 0, maximum: 2 })),
    top_p: Type.Optional(Type.Number({ minimum: 0, maximum: 1 })),
    reasoning: Type.Optional(
      Type.Object({ effort: Type.Optional(Type.Union([Type.String(), Type.Null()], { expected: "a string or null" })) }, { additionalProperties: true }),
    ),
    text: Type.Optional(
      Type.Object(
        { format: Type.Optional(Type.Object({ type: Type.String({ minLength: 1 }) }, { additionalProperties: true })) },
        { additionalProperties: true },
      ),
    ),
    stream: Type.Optional(Type.Boolean()),
    metadata: Type.Optional(Type.Record(Type.String(), Type.String())),
    user: Type.Optional(Type.String()),
    store: Type.Optional(Type.Boolean()),
    background: Type.Optional(Type.Boolean()),
    previous_response_id: Type.Optional(Type.String()),
    conversation: Type.Optional(Type.Unknown()),
  },
  { additionalProperties: true },
);

export type ResponsesRequest = Static<typeof ResponsesRequestSchema>;
type InputPart = Static<typeof Part> & Record<string, unknown>;
type Item = Static<typeof InputItem> & Record<string, unknown>;
/** A chat message as built here: chat messages carry fields (tool_calls, tool_call_id) the model leaves open. */
type Message = ChatMessage & Record<string, unknown>;

/** OpenAI accepts null for optional fields and treats it as absent; so does Sluice. */
const nullableFields = [
  "input",
  "instructions",
  "tools",
  "tool_choice",
  "parallel_tool_calls",
  "max_output_tokens",
  "temperature",
  "top_p",
  "reasoning",
  "text",
  "stream",
  "metadata",
  "user",
  "store",
  "background",
  "previous_response_id",
  "conversation",
] as const;

const nothingStored = "Sluice stores no prompts and no answers";

/** The text of content parts that carry text (`input_text`, `output_text`, `refusal`), joined as vLLM joins them. */
function textOfParts(parts: InputPart[], param: string): string | SluiceError {
  const texts: string[] = [];
  for (const [index, part] of parts.entries()) {
    if ((part.type === "input_text" || part.type === "output_text") && typeof part.text === "string") texts.push(part.text);
    else if (part.type === "refusal" && typeof part.refusal === "string") texts.push(part.refusal);
    else return invalidRequest(`Content parts of type '${part.type}' cannot be used here; send input_text or output_text.`, `${param}[${index}].type`);
  }
  return texts.join("\n");
}

/** A message item's content as chat content: a string, or parts when it holds images. */
function contentOf(content: string | InputPart[] | undefined, param: string): ChatMessage["content"] | SluiceError {
  if (content === undefined) return "";
  if (typeof content === "string") return content;
  if (!content.some((part) => part.type === "input_image")) return textOfParts(content, param);
  const parts: Record<string, unknown>[] = [];
  for (const [index, part] of content.entries()) {
    if (part.type === "input_image") {
      if (typeof part.image_url !== "string") {
        return invalidRequest(`${nothingStored} or files; send the image itself as an image_url (a URL or a data: URL).`, `${param}[${index}].image_url`);
      }
      parts.push({ type: "image_url", image_url: { url: part.image_url, ...(typeof part.detail === "string" ? { detail: part.detail } : {}) } });
    } else {
      const text = textOfParts([part], `${param}[${index}]`);
      if (typeof text !== "string") return text;
      parts.push({ type: "text", text });
    }
  }
  return parts as ChatMessage["content"];
}

const roles = new Set(["user", "assistant", "system", "developer"]);

/** Input items as chat messages: function calls join the assistant message before them; reasoning items are dropped. */
function messagesOf(input: string | Item[], param: string): Message[] | SluiceError {
  if (typeof input === "string") return [{ role: "user", content: input }];
  const messages: Message[] = [];
  for (const [index, item] of input.entries()) {
    const where = `${param}[${index}]`;
    const type = item.type ?? "message";
    if (type === "message") {
      if (!item.role || !roles.has(item.role))
        return invalidRequest(`Invalid '${where}.role': expected one of user, assistant, system or developer.`, `${where}.role`);
      const content = contentOf(item.content, `${where}.content`);
      if (content instanceof SluiceError) return content;
      messages.push({ role: item.role, content });
    } else if (type === "function_call") {
      if (typeof item.call_id !== "string") return missingParameter(`${where}.call_id`);
      if (typeof item.name !== "string") return missingParameter(`${where}.name`);
      const name = chatToolName(item.name, typeof item.namespace === "string" ? item.namespace : undefined);
      const call = { id: item.call_id, type: "function", function: { name, arguments: typeof item.arguments === "string" ? item.arguments : "{}" } };
      const last = messages.at(-1);
      // One assistant turn may hold text and several calls: chat carries them in one message.
      if (last?.role === "assistant") {
        last.tool_calls = [...((last.tool_calls as unknown[] | undefined) ?? []), call];
      } else messages.push({ role: "assistant", content: null, tool_calls: [call] });
    } else if (type === "function_call_output") {
      if (typeof item.call_id !== "string") return missingParameter(`${where}.call_id`);
      const output =
        typeof item.output === "string" ? item.output : Array.isArray(item.output) ? textOfParts(item.output as InputPart[], `${where}.output`) : "";
      if (typeof output !== "string") return output;
      messages.push({ role: "tool", tool_call_id: item.call_id, content: output });
    } else if (type === "reasoning") {
      // The model's earlier reasoning, sent back by clients; chat templates of open models drop it anyway.
    } else if (type === "item_reference") {
      return invalidRequest(`${nothingStored}, so an item cannot be referenced by id; send the item itself.`, `${where}.type`);
    } else {
      return invalidRequest(`Input items of type '${type}' are not supported; send messages, function_call and function_call_output items.`, `${where}.type`);
    }
  }
  return messages;
}

/** Between a namespace and a function's name in the chat tool's name: chat has no namespaces. */
const namespaceSeparator = "__";

/** The chat name of a function in a namespace (or of a plain function). */
export function chatToolName(name: string, namespace?: string): string {
  return namespace ? `${namespace}${namespaceSeparator}${name}` : name;
}

/** A chat tool name back as the function and namespace the caller defined, given the request's namespaces. */
export function splitToolName(chatName: string, namespaces: ReadonlySet<string>): { name: string; namespace?: string } {
  const at = chatName.indexOf(namespaceSeparator);
  if (at > 0 && namespaces.has(chatName.slice(0, at))) return { name: chatName.slice(at + namespaceSeparator.length), namespace: chatName.slice(0, at) };
  return { name: chatName };
}

/**
 * Function tools in the Responses shape → chat tools; a namespace's functions become functions named
 * `namespace__name`. Built-in tools cannot run behind a chat completions upstream.
 */
function toolsOf(tools: (Record<string, unknown> & { type: string })[], param = "tools", namespace?: string): Record<string, unknown>[] | SluiceError {
  const translated: Record<string, unknown>[] = [];
  for (const [index, tool] of tools.entries()) {
    if (tool.type === "namespace" && namespace === undefined && typeof tool.name === "string" && Array.isArray(tool.tools)) {
      const inner = toolsOf(tool.tools as (Record<string, unknown> & { type: string })[], `${param}[${index}].tools`, tool.name);
      if (inner instanceof SluiceError) return inner;
      translated.push(...inner);
      continue;
    }
    if (tool.type !== "function") {
      return invalidRequest(
        `The built-in tool '${tool.type}' is not available through Sluice, which serves models through Chat Completions; define it as a function tool.`,
        `${param}[${index}].type`,
      );
    }
    if (typeof tool.name !== "string" || tool.name === "") return missingParameter(`${param}[${index}].name`);
    const definition: Record<string, unknown> = { name: chatToolName(tool.name, namespace) };
    if (tool.description !== undefined && tool.description !== null) definition.description = tool.description;
    if (tool.parameters !== undefined && tool.parameters !== null) definition.parameters = tool.parameters;
    if (typeof tool.strict === "boolean") definition.strict = tool.strict;
    translated.push({ type: "function", function: definition });
  }
  return translated;
}

function toolChoiceOf(choice: string | (Record<string, unknown> & { type: string })): unknown {
  if (typeof choice === "string") {
    if (choice === "auto" || choice === "none" || choice === "required") return choice;
    return invalidRequest(`Invalid 'tool_choice': expected auto, none, required or a function, but got '${choice}'.`, "tool_choice");
  }
  if (choice.type === "function" && typeof choice.name === "string") return { type: "function", function: { name: choice.name } };
  return invalidRequest(`tool_choice of type '${choice.type}' is not supported; name a function tool.`, "tool_choice.type");
}

function responseFormatOf(format: Record<string, unknown> & { type: string }): unknown {
  if (format.type === "text") return undefined;
  if (format.type === "json_object") return { type: "json_object" };
  if (format.type === "json_schema") {
    const schema: Record<string, unknown> = { name: format.name ?? "response", schema: format.schema ?? {} };
    if (typeof format.strict === "boolean") schema.strict = format.strict;
    if (typeof format.description === "string") schema.description = format.description;
    return { type: "json_schema", json_schema: schema };
  }
  return invalidRequest(`Invalid 'text.format.type': expected text, json_object or json_schema, but got '${format.type}'.`, "text.format.type");
}

/** Validates a Responses request and translates it onto a chat request (400 in the OpenAI format otherwise). */
export function translateResponsesRequest(body: unknown): { request: ChatRequest; original: ResponsesRequest } | SluiceError {
  const original = validateBody(ResponsesRequestSchema, body, nullableFields);
  if (original instanceof SluiceError) return original;
  if (original.background === true)
    return invalidRequest("Background responses are not supported: Sluice answers each request while the caller waits.", "background");
  if (original.previous_response_id !== undefined) {
    return invalidRequest(`${nothingStored}, so a response cannot continue an earlier one; send the whole conversation in 'input'.`, "previous_response_id");
  }
  if (original.conversation !== undefined)
    return invalidRequest(`${nothingStored}, so there are no conversations; send the whole conversation in 'input'.`, "conversation");
  const raw = original as Record<string, unknown>;
  if (raw.prompt !== undefined && raw.prompt !== null) return invalidRequest(`${nothingStored}, so there are no stored prompt templates.`, "prompt");
  const messages: Message[] = original.instructions ? [{ role: "system", content: original.instructions }] : [];
  if (original.input === undefined) return missingParameter("input");
  const fromInput = messagesOf(original.input as string | Item[], "input");
  if (!Array.isArray(fromInput)) return fromInput;
  messages.push(...fromInput);
  if (messages.length === 0) return invalidRequest("Invalid 'input': empty array. Expected at least one message.", "input");
  const request: Record<string, unknown> = { model: original.model, messages };
  if (original.stream !== undefined) request.stream = original.stream;
  if (original.max_output_tokens !== undefined) request.max_tokens = original.max_output_tokens;
  if (original.temperature !== undefined) request.temperature = original.temperature;
  if (original.top_p !== undefined) request.top_p = original.top_p;
  if (original.parallel_tool_calls !== undefined) request.parallel_tool_calls = original.parallel_tool_calls;
  if (typeof original.reasoning?.effort === "string") request.reasoning_effort = original.reasoning.effort;
  if (typeof raw.prompt_cache_key === "string") request.prompt_cache_key = raw.prompt_cache_key;
  if (original.tools && original.tools.length > 0) {
    const tools = toolsOf(original.tools as (Record<string, unknown> & { type: string })[]);
    if (!Array.isArray(tools)) return tools;
    request.tools = tools;
  }
  if (original.tool_choice !== undefined) {
    const choice = toolChoiceOf(original.tool_choice as string | (Record<string, unknown> & { type: string }));
    if (choice instanceof SluiceError) return choice;
    request.tool_choice = choice;
  }
  if (original.text?.format) {
    const format = responseFormatOf(original.text.format as Record<string, unknown> & { type: string });
    if (format instanceof SluiceError) return format;
    if (format !== undefined) request.response_format = format;
  }
  return { request: request as ChatRequest, original };
}

/** Errors of the chat path name chat's parameters; a Responses caller sent these instead. */
export const renamedParameters: Record<string, string> = { max_tokens: "max_output_tokens", messages: "input" };
