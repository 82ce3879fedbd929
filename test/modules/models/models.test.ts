import { afterAll, beforeAll, expect, test } from "bun:test";
import OpenAI from "openai";
import { startFakeUpstream, type FakeUpstream } from "../../fake-upstream";
import { fakeModel, schemaErrors, startSluice, type TestSluice } from "../../helpers";

let upstream: FakeUpstream;
let sluice: TestSluice;

beforeAll(async () => {
  upstream = startFakeUpstream();
  sluice = await startSluice({
    models: [
      fakeModel(upstream.url, "qwen3-32b", "echo", { owned_by: "acme" }),
      fakeModel(upstream.url, "Qwen/Qwen3-8B", "echo"),
      fakeModel(upstream.url, "premium", "echo"),
      fakeModel(upstream.url, "off", "echo", { enabled: false }),
    ],
    plans: [
      { id: "default", models: ["qwen3-32b", "Qwen/Qwen3-8B", "off"] },
      { id: "all", models: ["*"] },
    ],
  });
});
afterAll(async () => {
  await sluice.stop();
  await upstream.stop();
});

test("GET /v1/models lists the plan's enabled models in OpenAI's shape", async () => {
  const page = await sluice.client().models.list();
  expect(page.data.map((model) => model.id)).toEqual(["qwen3-32b", "Qwen/Qwen3-8B"]);
  const raw = await (await fetch(`${sluice.baseURL}/models`, { headers: { authorization: `Bearer ${sluice.key}` } })).json();
  expect(schemaErrors("ListModelsResponse", raw)).toEqual([]);
  expect(page.data[0]).toMatchObject({ id: "qwen3-32b", object: "model", owned_by: "acme" });
  expect(Number.isInteger(page.data[0]!.created)).toBe(true);
  const all = await sluice.addOrganization("all-org", { plan: "all" });
  const allPage = await sluice.client({ apiKey: all.key }).models.list();
  expect(allPage.data.map((model) => model.id)).toEqual(["qwen3-32b", "Qwen/Qwen3-8B", "premium"]);
});

test("GET /v1/models/{model} returns one model, also with a slash in its id", async () => {
  const model = await sluice.client().models.retrieve("qwen3-32b");
  expect(schemaErrors("Model", model)).toEqual([]);
  expect(model.id).toBe("qwen3-32b");
  expect((await sluice.client().models.retrieve("Qwen/Qwen3-8B")).id).toBe("Qwen/Qwen3-8B");
});

test("unknown, outside the plan, or disabled: 404 model_not_found", async () => {
  for (const id of ["nope", "premium", "off"]) {
    const error = await sluice
      .client()
      .models.retrieve(id)
      .catch((caught: unknown) => caught);
    expect(error).toBeInstanceOf(OpenAI.NotFoundError);
    expect((error as InstanceType<typeof OpenAI.NotFoundError>).code).toBe("model_not_found");
  }
});

test("an id whose percent signs decode to nothing is an unknown model: 404 model_not_found, not a server error", async () => {
  for (const id of ["%", "%ZZ", "%E0%A4%A", "qwen3-32b%"]) {
    const response = await fetch(`${sluice.baseURL}/models/${id}`, { headers: { authorization: `Bearer ${sluice.key}` } });
    const body = (await response.json()) as { error: { code: string; message: string } };
    expect({ id, status: response.status, code: body.error.code }).toEqual({ id, status: 404, code: "model_not_found" });
    expect(body.error.message).toContain(id);
  }
});

test("the model routes require a key", async () => {
  expect((await fetch(`${sluice.baseURL}/models/qwen3-32b`)).status).toBe(401);
});
