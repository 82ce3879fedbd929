// A key limited to some of its plan's models: every API, /v1/models and count_tokens see only those; a change applies
// to the key's next request; the CLI and the console set them, checked against the configuration; the audit trail
// records them.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import Anthropic from "@anthropic-ai/sdk";
import { checkKeyModels, KeyError } from "../../../src/modules/keys/service";
import { listOf } from "../../../src/storage/key-lists";
import { ConsoleClient, consolePassword } from "../console/console-client";
import { sluiceCommand, withCliOrganization } from "../../support/sluice-process";
import { fakeModel, startSluice, testActor, useFakeUpstream, type TestSluice } from "../../helpers";

const upstream = useFakeUpstream();
const messages = [{ role: "user" as const, content: "Hello" }];
let sluice: TestSluice;
let organizationId: string;

beforeAll(async () => {
  sluice = await startSluice({
    models: [
      fakeModel(upstream.url, "small", "usage-10-5"),
      fakeModel(upstream.url, "large", "usage-10-5", { aliases: ["big"] }),
      fakeModel(upstream.url, "outside", "usage-10-5"),
    ],
    plans: [{ id: "default", models: ["small", "large"] }],
  });
  organizationId = (await sluice.organizations.findByName("acme"))?.id as string;
});
afterAll(async () => {
  await sluice.stop();
});

async function keyFor(models: string[] | null): Promise<{ id: string; secret: string }> {
  const { key, secret } = await sluice.keys.create({ organizationId, name: "limited", models }, testActor);
  return { id: key.id, secret };
}

/** The HTTP status an SDK call failed with; 0 when it succeeded. */
async function failedWith(call: () => Promise<unknown>): Promise<number> {
  try {
    await call();
    return 0;
  } catch (error) {
    return (error as { status?: number }).status ?? -1;
  }
}

async function statusOf(secret: string, model: string): Promise<number> {
  const response = await sluice.post("/v1/chat/completions", { model, messages }, { authorization: `Bearer ${secret}` });
  await response.arrayBuffer();
  return response.status;
}

test("checkKeyModels: ids checked against those known, repeats dropped, null for every model; an empty list or an unknown id refused", () => {
  expect(checkKeyModels(["a", " b ", "a"], ["a", "b"])).toEqual(["a", "b"]);
  expect(checkKeyModels(null, ["a"])).toBeNull();
  expect(() => checkKeyModels([], ["a"])).toThrow(KeyError);
  expect(() => checkKeyModels(["a", ""], ["a"])).toThrow("give at least one model id");
  expect(() => checkKeyModels(["a", "z", "y"], ["a", "b"])).toThrow('unknown models "z", "y": expected one of a, b');
  // What a hand-written column holds that is not a list of ids allows no model, never every one.
  expect([listOf('["a"]'), listOf(null), listOf("{"), listOf('"a"'), listOf("[1]")]).toEqual([["a"], null, [], [], []]);
});

describe("a key limited to one model of its plan", () => {
  test("chat, Responses and Messages call it (and its alias's model only if listed); every other model is 404 model_not_found, as outside the plan", async () => {
    const key = await keyFor(["small"]);
    expect(await statusOf(key.secret, "small")).toBe(200);
    expect(await statusOf(key.secret, "large")).toBe(404);
    expect(await statusOf(key.secret, "big")).toBe(404);
    expect(await statusOf(key.secret, "outside")).toBe(404);
    const refused = await sluice.post("/v1/chat/completions", { model: "large", messages }, { authorization: `Bearer ${key.secret}` });
    expect(((await refused.json()) as { error: { code: string; message: string } }).error).toMatchObject({
      code: "model_not_found",
      message: "The model 'large' does not exist or you do not have access to it.",
    });
    const client = sluice.client({ apiKey: key.secret });
    expect((await client.responses.create({ model: "small", input: "Hi" })).status).toBe("completed");
    expect(await failedWith(() => client.responses.create({ model: "large", input: "Hi" }))).toBe(404);
    const anthropic = new Anthropic({ baseURL: sluice.url, apiKey: key.secret, maxRetries: 0 });
    expect(await failedWith(() => anthropic.messages.create({ model: "large", max_tokens: 10, messages }))).toBe(404);
    expect(await failedWith(() => anthropic.messages.countTokens({ model: "large", messages }))).toBe(404);
    expect((await anthropic.messages.countTokens({ model: "small", messages })).input_tokens).toBeGreaterThan(0);
  });

  test("/v1/models lists only its models; /v1/models/{id} of another is 404; a key without a list sees the whole plan", async () => {
    const key = await keyFor(["large"]);
    const client = sluice.client({ apiKey: key.secret });
    expect((await client.models.list()).data.map((model) => model.id)).toEqual(["large"]);
    expect(await failedWith(() => client.models.retrieve("small"))).toBe(404);
    expect((await client.models.retrieve("big")).id).toBe("large");
    expect((await sluice.client().models.list()).data.map((model) => model.id)).toEqual(["small", "large"]);
  });

  test("a key never widens its plan: a key listing a model outside the plan still gets 404 for it", async () => {
    const key = await keyFor(["small", "outside"]);
    expect(await statusOf(key.secret, "outside")).toBe(404);
    expect(await statusOf(key.secret, "small")).toBe(200);
  });

  test("a change of its models applies to the key's very next request (the cached caller is dropped), and is audited", async () => {
    const key = await keyFor(["small"]);
    expect(await statusOf(key.secret, "large")).toBe(404);
    await sluice.keys.setLists(key.id, { models: ["small", "large"] }, testActor);
    expect(await statusOf(key.secret, "large")).toBe(200);
    await sluice.keys.setLists(key.id, { models: null }, testActor);
    expect(await statusOf(key.secret, "large")).toBe(200);
    await sluice.keys.setLists(key.id, { models: ["small"] }, testActor);
    expect(await statusOf(key.secret, "large")).toBe(404);
    const entries = (await sluice.audit.list({ limit: 100 })).filter((entry) => entry.target === key.id);
    expect(entries.map((entry) => [entry.action, entry.changes?.models])).toEqual([
      ["key.updated", [null, ["small"]]],
      ["key.updated", [["small", "large"], null]],
      ["key.updated", [["small"], ["small", "large"]]],
      ["key.created", [null, ["small"]]],
    ]);
  });
});

describe("setting a key's models", () => {
  test("the console: a member creates a key limited to a model of its plan, changes them, and is refused a model outside it", async () => {
    await sluice.accounts.createUser({ email: "member@example.com", password: consolePassword, role: "member", organizationId }, testActor);
    const member = new ConsoleClient(sluice.url);
    await member.signIn("member@example.com", consolePassword);
    expect((await member.json<{ organization: { models: string[] } }>("GET", "/me")).body.organization.models).toEqual(["small", "large"]);
    const created = await member.json<{ key: { id: string; models: string[] | null }; secret: string }>("POST", "/keys", { name: "ci", models: ["small"] });
    expect(created.status).toBe(201);
    expect(created.body.key.models).toEqual(["small"]);
    expect(await statusOf(created.body.secret, "large")).toBe(404);
    const outside = await member.json<{ error: { param: string; message: string } }>("POST", `/keys/${created.body.key.id}/limits`, { models: ["outside"] });
    expect(outside.status).toBe(400);
    expect(outside.body.error).toMatchObject({ param: "models", message: 'unknown model "outside": expected one of small, large (the models of your plan).' });
    const changed = await member.json<{ models: string[] | null }>("POST", `/keys/${created.body.key.id}/limits`, { models: ["large"] });
    expect(changed.body.models).toEqual(["large"]);
    expect(await statusOf(created.body.secret, "large")).toBe(200);
    // Caps alone leave the models as they are.
    expect((await member.json<{ models: string[] | null }>("POST", `/keys/${created.body.key.id}/limits`, { max_concurrency: 3 })).body.models).toEqual([
      "large",
    ]);
    expect((await member.json("POST", "/keys", { name: "bad", models: "small" })).status).toBe(400);
    const listed = (await member.json<{ id: string; models: string[] | null }[]>("GET", "/keys")).body;
    expect(listed.find((key) => key.id === created.body.key.id)?.models).toEqual(["large"]);
  });

  test("the CLI: key create --models, key update --models (all for every model), listed; an unknown model refused with the known ones", async () => {
    await withCliOrganization(upstream.url, ["small", "large"], (environment) => {
      const created = sluiceCommand(environment, "key", "create", "--org", "acme", "--models", "small");
      expect(created.code).toBe(0);
      // Models are the last column but one (networks are the last).
      const listed = () => sluiceCommand(environment, "key", "list", "--org", "acme").stdout.trim().split("\t").at(-2);
      expect(listed()).toBe("small");
      const keyId = created.stderr.match(/created key (key_[\w-]+)/)?.[1] as string;
      expect(sluiceCommand(environment, "key", "update", keyId, "--models", "small,large").stdout.trim().split("\t").at(-2)).toBe("small,large");
      expect(sluiceCommand(environment, "key", "update", keyId, "--models", "all").code).toBe(0);
      expect(listed()).toBe("all");
      const unknown = sluiceCommand(environment, "key", "update", keyId, "--models", "huge");
      expect(unknown.code).toBe(2);
      expect(unknown.stderr).toContain('unknown model "huge": expected one of small, large');
    });
  });
});
