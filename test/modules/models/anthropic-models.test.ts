// The model routes for Anthropic's clients (they send `anthropic-version`, and the key in `x-api-key`): Anthropic's
// ModelInfo and its pages, and its error shape; OpenAI's clients get OpenAI's shapes as before.
import { afterAll, beforeAll, expect, test } from "bun:test";
import Anthropic from "@anthropic-ai/sdk";
import { fakeModel, schemaErrors, startSluice, useFakeUpstream, type TestSluice } from "../../helpers";

const upstream = useFakeUpstream();
let sluice: TestSluice;
let anthropic: Anthropic;

beforeAll(async () => {
  sluice = await startSluice({
    models: ["a", "b", "c", "d", "e"].map((id) => fakeModel(upstream.url, id, "usage-10-5", { context_window: 65_536, max_output_tokens: 8192 })),
    plans: [{ id: "default", models: ["*"] }],
  });
  anthropic = new Anthropic({ baseURL: sluice.url, apiKey: sluice.key, maxRetries: 0 });
});
afterAll(async () => {
  await sluice.stop();
});

test("models.list and models.retrieve through the Anthropic SDK: ModelInfo with the model's limits", async () => {
  const page = await anthropic.models.list();
  expect(page.data.map((model) => model.id)).toEqual(["a", "b", "c", "d", "e"]);
  expect(page.data[0]).toMatchObject({ type: "model", id: "a", display_name: "a", max_input_tokens: 65_536, max_tokens: 8192 });
  expect(Number.isNaN(Date.parse(page.data[0]?.created_at as string))).toBe(false);
  expect(await anthropic.models.retrieve("c")).toMatchObject({ type: "model", id: "c" });
});

test("pages: limit, after_id and before_id, as the SDK walks them; first_id, last_id and has_more", async () => {
  const seen: string[] = [];
  for await (const model of anthropic.models.list({ limit: 2 })) seen.push(model.id);
  expect(seen).toEqual(["a", "b", "c", "d", "e"]);
  const headers = { "x-api-key": sluice.key, "anthropic-version": "2023-06-01" };
  const get = async (query: string) => (await fetch(`${sluice.url}/v1/models${query}`, { headers })).json();
  expect(await get("?limit=2&after_id=b")).toMatchObject({ first_id: "c", last_id: "d", has_more: true });
  expect(await get("?limit=2&after_id=d")).toMatchObject({ first_id: "e", last_id: "e", has_more: false });
  expect(await get("?limit=2&before_id=d")).toMatchObject({ first_id: "b", last_id: "c", has_more: true });
  expect(await get("?limit=5&before_id=b")).toMatchObject({ first_id: "a", last_id: "a", has_more: false });
  for (const query of ["?limit=0", "?limit=1001", "?limit=x", "?after_id=zz", "?after_id=a&before_id=c"]) {
    const response = await fetch(`${sluice.url}/v1/models${query}`, { headers });
    expect(response.status).toBe(400);
    expect(((await response.json()) as { type: string; error: { type: string } }).error.type).toBe("invalid_request_error");
  }
});

test("errors in Anthropic's shape: an unknown model 404 not_found_error, a wrong key 401 authentication_error, with request-id", async () => {
  const missing = await fetch(`${sluice.url}/v1/models/zz`, { headers: { "x-api-key": sluice.key, "anthropic-version": "2023-06-01" } });
  expect(missing.status).toBe(404);
  expect(await missing.json()).toMatchObject({ type: "error", error: { type: "not_found_error" } });
  expect(missing.headers.get("request-id")).toMatch(/^req_/);
  const wrong = new Anthropic({ baseURL: sluice.url, apiKey: "sk-sluice-wrong", maxRetries: 0 });
  let status = 0;
  try {
    await wrong.models.list();
  } catch (error) {
    status = (error as { status: number }).status;
    expect((error as { error: { error: { type: string } } }).error.error.type).toBe("authentication_error");
  }
  expect(status).toBe(401);
});

test("OpenAI's clients get OpenAI's list and errors as before, valid by OpenAI's schemas", async () => {
  const list = await (await fetch(`${sluice.url}/v1/models`, { headers: { authorization: `Bearer ${sluice.key}` } })).json();
  expect(schemaErrors("ListModelsResponse", list)).toEqual([]);
  const missing = await fetch(`${sluice.url}/v1/models/zz`, { headers: { authorization: `Bearer ${sluice.key}` } });
  expect(schemaErrors("ErrorResponse", await missing.json())).toEqual([]);
  expect((await sluice.client().models.list()).data).toHaveLength(5);
});
