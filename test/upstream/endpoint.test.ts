// Hosted APIs that are not called as vLLM is: Azure OpenAI's deployments (the API version in the query, the key in
// `api-key`), and services that want headers of their own (OpenRouter's `HTTP-Referer`).
import { afterAll, beforeAll, expect, test } from "bun:test";
import { accessHeaders, upstreamUrl } from "../../src/upstream/endpoint";
import { fakeModel, startSluice, useFakeUpstream, type TestSluice } from "../helpers";

const upstream = useFakeUpstream();
let sluice: TestSluice;
const messages = [{ role: "user" as const, content: "Hello" }];

beforeAll(async () => {
  const host = upstream.url.replace(/\/v1$/, "");
  sluice = await startSluice(
    {
      models: [
        fakeModel(upstream.url, "azure", "usage-10-5", {
          base_url: `${host}/openai/deployments/gpt-4o/?api-version=2024-10-21`,
          api_key_env: "AZURE_OPENAI_KEY",
          api_key_header: "api-key",
        }),
        fakeModel(upstream.url, "routed", "usage-10-5", { api_key_env: "ROUTER_KEY", headers: { "HTTP-Referer": "https://example.com", "X-Title": "Sluice" } }),
      ],
      plans: [{ id: "default", models: ["*"] }],
    },
    { environment: { AZURE_OPENAI_KEY: "azure-secret", ROUTER_KEY: "router-secret" } },
  );
});
afterAll(async () => {
  await sluice.stop();
});

test("upstreamUrl: the route after the base's path, its query kept, a trailing slash dropped", () => {
  expect(upstreamUrl("http://h:8000/v1", "/chat/completions")).toBe("http://h:8000/v1/chat/completions");
  expect(upstreamUrl("https://r.openai.azure.com/openai/deployments/d/?api-version=2024-10-21", "/chat/completions")).toBe(
    "https://r.openai.azure.com/openai/deployments/d/chat/completions?api-version=2024-10-21",
  );
});

test("accessHeaders: the model's headers, then the key as a bearer token or bare in its own header; no key, no header", () => {
  expect(accessHeaders({ headers: { "x-title": "S" }, apiKeyHeader: undefined }, "k")).toEqual({ "x-title": "S", authorization: "Bearer k" });
  expect(accessHeaders({ headers: {}, apiKeyHeader: "api-key" }, "k")).toEqual({ "api-key": "k" });
  expect(accessHeaders({ headers: {}, apiKeyHeader: "api-key" }, undefined)).toEqual({});
});

test("Azure OpenAI: whole and streamed, the deployment's route with api-version, the key in api-key and no Authorization", async () => {
  upstream.reset();
  await sluice.client().chat.completions.create({ model: "azure", messages });
  const stream = await sluice.client().chat.completions.create({ model: "azure", messages, stream: true });
  for await (const _ of stream) {
    // drained
  }
  expect(upstream.requests.map((request) => request.path)).toEqual(Array(2).fill("/openai/deployments/gpt-4o/chat/completions?api-version=2024-10-21"));
  for (const { headers } of upstream.requests) {
    expect(headers["api-key"]).toBe("azure-secret");
    expect(headers.authorization).toBeUndefined();
    expect(headers["content-type"]).toBe("application/json");
  }
});

test("a model's own headers go with every call, beside the bearer key", async () => {
  upstream.reset();
  await sluice.client().chat.completions.create({ model: "routed", messages });
  expect(upstream.requests[0]?.path).toBe("/v1/chat/completions");
  expect(upstream.requests[0]?.headers).toMatchObject({ "http-referer": "https://example.com", "x-title": "Sluice", authorization: "Bearer router-secret" });
});
