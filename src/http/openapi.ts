import { ChatRequestSchema } from "../modules/chat/model";

const errorResponse = { $ref: "#/components/responses/Error" };

/** The public interface as OpenAPI 3.1.0 (spec section 9). Request bodies reuse the TypeBox schemas. */
export const openApiDocument = {
  openapi: "3.1.0",
  info: { title: "Sluice", version: "0.1.0", description: "OpenAI-compatible gateway for reasoning language models." },
  servers: [{ url: "/" }],
  security: [{ bearer: [] }],
  components: {
    securitySchemes: { bearer: { type: "http", scheme: "bearer" } },
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
    },
  },
  paths: {
    "/v1/models": {
      get: {
        summary: "List available models",
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
          "400": errorResponse,
          "401": errorResponse,
          "403": errorResponse,
          "404": errorResponse,
          "429": errorResponse,
          "502": errorResponse,
          "503": errorResponse,
        },
      },
    },
  },
} as const;
