import { ChatRequestSchema } from "../modules/chat/model";
import { CompletionsRequestSchema } from "../modules/completions/model";
import { EmbeddingsRequestSchema } from "../modules/embeddings/model";
import { CountTokensRequestSchema, MessagesRequestSchema } from "../modules/messages/model";
import { ResponsesRequestSchema } from "../modules/responses/model";

const errorResponse = { $ref: "#/components/responses/Error" };
const anthropicErrorResponse = { $ref: "#/components/responses/AnthropicError" };
const answerErrors = {
  "400": errorResponse,
  "401": errorResponse,
  "403": errorResponse,
  "404": errorResponse,
  "413": errorResponse,
  "429": errorResponse,
  "502": errorResponse,
  "503": errorResponse,
};
const anthropicErrors = Object.fromEntries(Object.keys(answerErrors).map((status) => [status, anthropicErrorResponse]));

/** The public interface as OpenAPI 3.1.0 (spec section 9). Request bodies reuse the TypeBox schemas. */
export const openApiDocument = {
  openapi: "3.1.0",
  info: { title: "Sluice", version: "0.1.0", description: "OpenAI-compatible gateway for reasoning language models." },
  servers: [{ url: "/" }],
  security: [{ bearer: [] }],
  components: {
    securitySchemes: { bearer: { type: "http", scheme: "bearer" }, apiKey: { type: "apiKey", in: "header", name: "x-api-key" } },
    schemas: {
      Model: {
        type: "object",
        required: ["id", "object", "created", "owned_by"],
        properties: { id: { type: "string" }, object: { const: "model" }, created: { type: "integer" }, owned_by: { type: "string" } },
      },
      ModelList: {
        type: "object",
        required: ["object", "data"],
        properties: { object: { const: "list" }, data: { type: "array", items: { $ref: "#/components/schemas/Model" } } },
      },
      ChatCompletionRequest: ChatRequestSchema,
      EmbeddingsRequest: EmbeddingsRequestSchema,
      CompletionsRequest: CompletionsRequestSchema,
      ResponsesRequest: ResponsesRequestSchema,
      MessagesRequest: MessagesRequestSchema,
      CountTokensRequest: CountTokensRequestSchema,
      AnthropicError: {
        type: "object",
        required: ["type", "error"],
        properties: {
          type: { const: "error" },
          error: { type: "object", required: ["type", "message"], properties: { type: { type: "string" }, message: { type: "string" } } },
        },
      },
      Error: {
        type: "object",
        required: ["error"],
        properties: {
          error: {
            type: "object",
            required: ["message", "type", "param", "code"],
            properties: {
              message: { type: "string" },
              type: { type: "string" },
              param: { type: ["string", "null"] },
              code: { type: "string" },
            },
          },
        },
      },
    },
    responses: {
      Error: {
        description: "An error in the OpenAI format; 429 and 503 carry Retry-After",
        content: { "application/json": { schema: { $ref: "#/components/schemas/Error" } } },
      },
      AnthropicError: {
        description: "An error in Anthropic's format (same status codes as the OpenAI routes); 429 and 503 carry Retry-After",
        content: { "application/json": { schema: { $ref: "#/components/schemas/AnthropicError" } } },
      },
    },
  },
  paths: {
    "/v1/models": {
      get: {
        summary: "List available models",
        description:
          "OpenAI's list; with an `anthropic-version` header (Anthropic's clients), Anthropic's page of ModelInfo (`limit`, `after_id`, `before_id`) and its error shape.",
        security: [{ bearer: [] }, { apiKey: [] }],
        responses: {
          "200": { description: "Model list", content: { "application/json": { schema: { $ref: "#/components/schemas/ModelList" } } } },
          "401": errorResponse,
          "403": errorResponse,
        },
      },
    },
    "/v1/models/{model}": {
      get: {
        summary: "Retrieve a model",
        description: "OpenAI's model object; with an `anthropic-version` header, Anthropic's ModelInfo.",
        security: [{ bearer: [] }, { apiKey: [] }],
        parameters: [{ name: "model", in: "path", required: true, schema: { type: "string" } }],
        responses: {
          "200": { description: "Model", content: { "application/json": { schema: { $ref: "#/components/schemas/Model" } } } },
          "401": errorResponse,
          "403": errorResponse,
          "404": errorResponse,
        },
      },
    },
    "/v1/chat/completions": {
      post: {
        summary: "Create a chat completion; streaming supported",
        requestBody: { required: true, content: { "application/json": { schema: { $ref: "#/components/schemas/ChatCompletionRequest" } } } },
        responses: {
          "200": {
            description: "A chat.completion object, or server-sent chat.completion.chunk events ending with data: [DONE]",
            content: { "application/json": { schema: { type: "object" } }, "text/event-stream": { schema: { type: "string" } } },
          },
          ...answerErrors,
        },
      },
    },
    "/v1/embeddings": {
      post: {
        summary: "Create embeddings (OpenAI's embeddings API): prompt tokens count against the quotas; never a fallback model",
        requestBody: { required: true, content: { "application/json": { schema: { $ref: "#/components/schemas/EmbeddingsRequest" } } } },
        responses: {
          "200": { description: "A list of embedding objects, one an input, and usage", content: { "application/json": { schema: { type: "object" } } } },
          ...answerErrors,
        },
      },
    },
    "/v1/completions": {
      post: {
        summary: "Create a text completion (OpenAI's legacy completions API, for autocomplete: `suffix` for fill-in-the-middle)",
        requestBody: { required: true, content: { "application/json": { schema: { $ref: "#/components/schemas/CompletionsRequest" } } } },
        responses: {
          "200": {
            description: "A text_completion object, or server-sent text_completion chunks ending with [DONE]",
            content: { "application/json": { schema: { type: "object" } }, "text/event-stream": { schema: { type: "string" } } },
          },
          ...answerErrors,
        },
      },
    },
    "/v1/responses": {
      post: {
        summary: "Create a response (OpenAI Responses API, stateless: nothing is stored); translated onto chat completions",
        requestBody: { required: true, content: { "application/json": { schema: { $ref: "#/components/schemas/ResponsesRequest" } } } },
        responses: {
          "200": {
            description: "A response object, or server-sent Responses events (response.created … response.completed / response.incomplete)",
            content: { "application/json": { schema: { type: "object" } }, "text/event-stream": { schema: { type: "string" } } },
          },
          ...answerErrors,
        },
      },
    },
    "/v1/messages": {
      post: {
        summary: "Create a message (Anthropic Messages API); translated onto chat completions",
        security: [{ apiKey: [] }, { bearer: [] }],
        requestBody: { required: true, content: { "application/json": { schema: { $ref: "#/components/schemas/MessagesRequest" } } } },
        responses: {
          "200": {
            description: "A message object, or server-sent Messages events (message_start … message_stop, ping while the model is silent)",
            content: { "application/json": { schema: { type: "object" } }, "text/event-stream": { schema: { type: "string" } } },
          },
          ...anthropicErrors,
        },
      },
    },
    "/v1/messages/count_tokens": {
      post: {
        summary: "Count a Messages request's input tokens with Sluice's tokenizer (no quota, no upstream call)",
        security: [{ apiKey: [] }, { bearer: [] }],
        requestBody: { required: true, content: { "application/json": { schema: { $ref: "#/components/schemas/CountTokensRequest" } } } },
        responses: {
          "200": {
            description: "The input tokens",
            content: { "application/json": { schema: { type: "object", required: ["input_tokens"], properties: { input_tokens: { type: "integer" } } } } },
          },
          ...anthropicErrors,
        },
      },
    },
  },
} as const;
