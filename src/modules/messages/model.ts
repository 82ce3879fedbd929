import { Type, type Static } from "@sinclair/typebox";
import { SluiceError, invalidRequest, missingParameter } from "../../errors";
import { validateBody } from "../../validation";
import type { ChatMessage, ChatRequest } from "../chat/model";

const Block = Type.Object({ type: Type.String({ minLength: 1 }) }, { additionalProperties: true });
const Content = Type.Union([Type.String(), Type.Array(Block)], { expected: "a string or an array of content blocks" });

const MessageSchema = Type.Object(
  {
    // `system` turns are what Claude Code 2.1 sends among its messages (see chatMessagesOf).
    role: Type.Union([Type.Literal("user"), Type.Literal("assistant"), Type.Literal("system")], { expected: "user, assistant or system" }),
    content: Content,
  },
  { additionalProperties: true },
);

const fields = {
  model: Type.String({ minLength: 1 }),
  messages: Type.Array(MessageSchema, { minItems: 1 }),
  system: Type.Optional(Content),
  tools: Type.Optional(Type.Array(Type.Object({ name: Type.String({ minLength: 1 }) }, { additionalProperties: true }))),
  tool_choice: Type.Optional(Type.Object({ type: Type.String({ minLength: 1 }) }, { additionalProperties: true })),
  stop_sequences: Type.Optional(Type.Array(Type.String())),
  temperature: Type.Optional(Type.Number({ minimum: 0, maximum: 1 })),
  top_p: Type.Optional(Type.Number({ minimum: 0, maximum: 1 })),
  top_k: Type.Optional(Type.Integer({ minimum: 0 })),
  thinking: Type.Optional(Type.Object({ type: Type.String({ minLength: 1 }) }, { additionalProperties: true })),
  metadata: Type.Optional(Type.Object({}, { additionalProperties: true })),
  output_config: Type.Optional(Type.Object({ effort: Type.Optional(Type.String()) }, { additionalProperties: true })),
  stream: Type.Optional(Type.Boolean()),
};

/** The fields of Anthropic's `POST /v1/messages` that Sluice reads; others are ignored. */
export const MessagesRequestSchema = Type.Object(
  { ...fields, max_tokens: Type.Integer({ minimum: 1, description: "Output limit, thinking included" }) },
  { additionalProperties: true },
);

/** `POST /v1/messages/count_tokens`: the same, without an output limit. */
export const CountTokensRequestSchema = Type.Object(fields, { additionalProperties: true });

export type MessagesRequest = Static<typeof MessagesRequestSchema>;
type CountTokensRequest = Static<typeof CountTokensRequestSchema>;
type ContentBlock = Static<typeof Block> & Record<string, unknown>;
type Message = ChatMessage & Record<string, unknown>;

const nullableFields = [
  "system",
  "tools",
  "tool_choice",
  "stop_sequences",
  "temperature",
  "top_p",
  "top_k",
  "thinking",
  "metadata",
  "output_config",
  "stream",
] as const;

/**
 * How an extended-thinking budget becomes the `reasoning_effort` open reasoning models take: under 4,096 tokens
 * low, under 16,384 medium, more high. Thinking `disabled`, `adaptive` or of a type not known here sends none (the
 * model's own default), unless `output_config.effort` names one (low, medium, high; max is sent as high).
 */
export function effortOfBudget(budgetTokens: number): "low" | "medium" | "high" {
  if (budgetTokens < 4096) return "low";
  if (budgetTokens < 16384) return "medium";
  return "high";
}

function textOfBlocks(blocks: ContentBlock[], param: string, allowed: string): string | SluiceError {
  const texts: string[] = [];
  for (const [index, block] of blocks.entries()) {
    if (block.type === "text" && typeof block.text === "string") texts.push(block.text);
    else return invalidRequest(`Content blocks of type '${block.type}' cannot be used here; send ${allowed}.`, `${param}[${index}].type`);
  }
  return texts.join("\n");
}

/** An image block as a chat image part: base64 data becomes a data: URL. */
function imagePart(block: ContentBlock, param: string): Record<string, unknown> | SluiceError {
  const source = block.source as { type?: string; media_type?: string; data?: string; url?: string } | undefined;
  if (source?.type === "base64" && typeof source.data === "string") {
    return { type: "image_url", image_url: { url: `data:${source.media_type ?? "image/png"};base64,${source.data}` } };
  }
  if (source?.type === "url" && typeof source.url === "string") return { type: "image_url", image_url: { url: source.url } };
  return invalidRequest("An image must have a base64 or url source; Sluice stores no files.", `${param}.source`);
}

const omittedImage = "[an image was returned here; this gateway passes tool results to the model as text only]";

function toolResultContent(block: ContentBlock, param: string): string | SluiceError {
  const content = block.content;
  let text: string | SluiceError = "";
  if (typeof content === "string") text = content;
  else if (Array.isArray(content)) {
    // A chat tool message carries text only: an image in a tool result is named in its place rather than lost unseen.
    const blocks = content.map((part: ContentBlock) => (part.type === "image" ? { type: "text", text: omittedImage } : part));
    text = textOfBlocks(blocks, `${param}.content`, "text or image blocks");
  }
  if (typeof text !== "string") return text;
  return block.is_error === true ? `Error: ${text}` : text;
}

/** A user turn: its tool results first (chat wants them right after the calls), then what the user wrote. */
function userMessages(blocks: ContentBlock[], param: string): Message[] | SluiceError {
  const messages: Message[] = [];
  const parts: Record<string, unknown>[] = [];
  for (const [index, block] of blocks.entries()) {
    const where = `${param}[${index}]`;
    if (block.type === "tool_result") {
      if (typeof block.tool_use_id !== "string") return missingParameter(`${where}.tool_use_id`);
      const content = toolResultContent(block, where);
      if (typeof content !== "string") return content;
      messages.push({ role: "tool", tool_call_id: block.tool_use_id, content });
    } else if (block.type === "text" && typeof block.text === "string") parts.push({ type: "text", text: block.text });
    else if (block.type === "image") {
      const part = imagePart(block, where);
      if (part instanceof SluiceError) return part;
      parts.push(part);
    } else if (block.type === "document" && (block.source as { type?: string; data?: unknown })?.type === "text") {
      parts.push({ type: "text", text: String((block.source as { data?: unknown }).data ?? "") });
    } else if (block.type === "thinking" || block.type === "redacted_thinking") {
      // Sent back by clients with the conversation; an open model's template drops earlier reasoning anyway.
    } else return invalidRequest(`Content blocks of type '${block.type}' are not supported; send text, image, tool_use or tool_result.`, `${where}.type`);
  }
  if (parts.length > 0) {
    const textOnly = parts.every((part) => part.type === "text");
    messages.push({ role: "user", content: textOnly ? parts.map((part) => part.text as string).join("\n") : (parts as ChatMessage["content"]) });
  }
  return messages;
}

/** An assistant turn: its text, and its tool uses as chat tool calls; thinking is dropped. */
function assistantMessage(blocks: ContentBlock[], param: string): Message | SluiceError {
  const texts: string[] = [];
  const calls: Record<string, unknown>[] = [];
  for (const [index, block] of blocks.entries()) {
    const where = `${param}[${index}]`;
    if (block.type === "text" && typeof block.text === "string") texts.push(block.text);
    else if (block.type === "tool_use") {
      if (typeof block.id !== "string") return missingParameter(`${where}.id`);
      if (typeof block.name !== "string") return missingParameter(`${where}.name`);
      calls.push({ id: block.id, type: "function", function: { name: block.name, arguments: JSON.stringify(block.input ?? {}) } });
    } else if (block.type === "thinking" || block.type === "redacted_thinking") {
      // See userMessages.
    } else return invalidRequest(`Content blocks of type '${block.type}' are not supported in an assistant turn; send text or tool_use.`, `${where}.type`);
  }
  const message: Message = { role: "assistant", content: texts.length > 0 ? texts.join("\n") : null };
  if (calls.length > 0) message.tool_calls = calls;
  return message;
}

/**
 * The system prompt and the turns as chat messages. System turns among the messages join the system prompt, in
 * order: the chat templates of many open models refuse a system message anywhere but first.
 */
export function chatMessagesOf(request: CountTokensRequest): Message[] | SluiceError {
  const messages: Message[] = [];
  const system: string[] = [];
  if (request.system !== undefined) {
    const text = typeof request.system === "string" ? request.system : textOfBlocks(request.system as ContentBlock[], "system", "text blocks");
    if (typeof text !== "string") return text;
    if (text !== "") system.push(text);
  }
  for (const [index, message] of request.messages.entries()) {
    const where = `messages[${index}].content`;
    if (message.role === "system") {
      const text = typeof message.content === "string" ? message.content : textOfBlocks(message.content as ContentBlock[], where, "text blocks");
      if (typeof text !== "string") return text;
      if (text !== "") system.push(text);
      continue;
    }
    if (typeof message.content === "string") {
      messages.push({ role: message.role, content: message.content });
      continue;
    }
    const blocks = message.content as ContentBlock[];
    const translated = message.role === "user" ? userMessages(blocks, where) : assistantMessage(blocks, where);
    if (translated instanceof SluiceError) return translated;
    if (Array.isArray(translated)) messages.push(...translated);
    else messages.push(translated);
  }
  if (system.length > 0) messages.unshift({ role: "system", content: system.join("\n\n") });
  return messages;
}

/** Anthropic tools (custom tools with an `input_schema`) as chat function tools. */
export function chatToolsOf(tools: (Record<string, unknown> & { name: string })[]): Record<string, unknown>[] | SluiceError {
  const translated: Record<string, unknown>[] = [];
  for (const [index, tool] of tools.entries()) {
    if (tool.type !== undefined && tool.type !== null && tool.type !== "custom") {
      return invalidRequest(
        `The server tool '${String(tool.type)}' is not available through Sluice, which serves models through Chat Completions; define it as a custom tool with an input_schema.`,
        `tools[${index}].type`,
      );
    }
    const definition: Record<string, unknown> = { name: tool.name, parameters: tool.input_schema ?? { type: "object", properties: {} } };
    if (typeof tool.description === "string") definition.description = tool.description;
    translated.push({ type: "function", function: definition });
  }
  return translated;
}

function toolChoiceOf(choice: Record<string, unknown> & { type: string }): unknown {
  switch (choice.type) {
    case "auto":
      return "auto";
    case "any":
      return "required";
    case "none":
      return "none";
    case "tool":
      if (typeof choice.name !== "string") return missingParameter("tool_choice.name");
      return { type: "function", function: { name: choice.name } };
    default:
      return invalidRequest(`Invalid 'tool_choice.type': expected auto, any, tool or none, but got '${choice.type}'.`, "tool_choice.type");
  }
}

/** Validates a Messages request and translates it onto a chat request (400 in Anthropic's format otherwise). */
export function translateMessagesRequest(body: unknown): ChatRequest | SluiceError {
  const original = validateBody(MessagesRequestSchema, body, nullableFields);
  if (original instanceof SluiceError) return original;
  const messages = chatMessagesOf(original);
  if (messages instanceof SluiceError) return messages;
  const request: Record<string, unknown> = { model: original.model, messages, max_tokens: original.max_tokens };
  if (original.stream !== undefined) request.stream = original.stream;
  if (original.temperature !== undefined) request.temperature = original.temperature;
  if (original.top_p !== undefined) request.top_p = original.top_p;
  if (original.stop_sequences && original.stop_sequences.length > 0) request.stop = original.stop_sequences;
  if (original.tools && original.tools.length > 0) {
    const tools = chatToolsOf(original.tools as (Record<string, unknown> & { name: string })[]);
    if (tools instanceof SluiceError) return tools;
    request.tools = tools;
  }
  if (original.tool_choice) {
    const choice = toolChoiceOf(original.tool_choice as Record<string, unknown> & { type: string });
    if (choice instanceof SluiceError) return choice;
    request.tool_choice = choice;
    if ((original.tool_choice as Record<string, unknown>).disable_parallel_tool_use === true) request.parallel_tool_calls = false;
  }
  const thinking = original.thinking as { type: string; budget_tokens?: unknown } | undefined;
  if (thinking?.type === "enabled" && typeof thinking.budget_tokens === "number") request.reasoning_effort = effortOfBudget(thinking.budget_tokens);
  const effort = original.output_config?.effort;
  if (effort === "low" || effort === "medium" || effort === "high") request.reasoning_effort = effort;
  else if (effort === "max") request.reasoning_effort = "high";
  return request as ChatRequest;
}

/** Validates a count_tokens request; its chat messages (tools counted as a system message of their JSON). */
export function countTokensMessages(body: unknown): { model: string; messages: Message[] } | SluiceError {
  const original = validateBody(CountTokensRequestSchema, body, nullableFields);
  if (original instanceof SluiceError) return original;
  const messages = chatMessagesOf(original);
  if (messages instanceof SluiceError) return messages;
  if (original.tools && original.tools.length > 0) {
    const tools = chatToolsOf(original.tools as (Record<string, unknown> & { name: string })[]);
    if (tools instanceof SluiceError) return tools;
    messages.unshift({ role: "system", content: JSON.stringify(tools) });
  }
  return { model: original.model, messages };
}
