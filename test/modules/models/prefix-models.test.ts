// Prefix models: one entry (`hosted/*`) for every model of a hosted API, the name after the prefix sent upstream.
import { describe, expect, test } from "bun:test";
import Anthropic from "@anthropic-ai/sdk";
import { ConfigError, resolveConfig } from "../../../src/config/load";
import { testActor, failureOf, fakeModel, schemaErrors, useFakeUpstream, withSluice } from "../../helpers";

const upstream = useFakeUpstream({ resetBeforeEach: true });
const question = [{ role: "user" as const, content: "hi" }];

/** A hosted API's every model under `hosted/`, a more specific prefix beside it, and a model of its own that wins by its exact id. */
function config() {
  return {
    models: [
      { id: "hosted/*", backend: "openai" as const, base_url: upstream.url, context_window: 32_000 },
      { id: "hosted/special/*", backend: "openai" as const, base_url: `${upstream.url}?server=special` },
      fakeModel(upstream.url, "hosted/usage-1-1", "usage-3-3"),
      fakeModel(upstream.url, "local", "usage-10-5"),
    ],
    plans: [
      { id: "default", models: ["*"] },
      { id: "local-only", models: ["local"] },
    ],
  };
}

describe("a prefix model", () => {
  test("takes every name under its prefix, sends the rest upstream, answers and bills under the whole name", async () => {
    await withSluice(config(), async (sluice) => {
      const client = sluice.client();
      const { data: answer, response } = await client.chat.completions.create({ model: "hosted/usage-10-5", messages: question }).withResponse();
      expect(upstream.bodies.at(-1)?.model).toBe("usage-10-5");
      expect(upstream.requests.at(-1)?.path).toBe("/v1/chat/completions");
      expect(answer.model).toBe("hosted/usage-10-5");
      expect(answer.usage).toMatchObject({ prompt_tokens: 10, completion_tokens: 5 });
      expect(schemaErrors("CreateChatCompletionResponse", answer)).toEqual([]);
      // The ledger records the model asked for, so usage shows each of the hosted API's models.
      const requestId = response.headers.get("x-request-id");
      expect(sluice.ledgerRows().find((row) => row.request_id === requestId)?.model).toBe("hosted/usage-10-5");
      // The metrics count it under the prefix model: one series, however many names callers send.
      const metrics = await (await fetch(`${sluice.url}/metrics`)).text();
      expect(metrics).toContain('sluice_tokens_total{model="hosted/*",kind="prompt"} 10');

      // Streamed, through the Messages API, and embeddings.
      const stream = await client.chat.completions.create({ model: "hosted/usage-10-5", messages: question, stream: true });
      const models = new Set<string>();
      for await (const chunk of stream) models.add(chunk.model);
      expect([...models]).toEqual(["hosted/usage-10-5"]);
      const anthropic = new Anthropic({ baseURL: sluice.url, apiKey: sluice.key, maxRetries: 0 });
      const message = await anthropic.messages.create({ model: "hosted/usage-10-5", max_tokens: 10, messages: question });
      expect(message.model).toBe("hosted/usage-10-5");
      expect(upstream.bodies.at(-1)?.model).toBe("usage-10-5");
      const embedded = await client.embeddings.create({ model: "hosted/text-embedding-3-small", input: "hi" }).withResponse();
      expect(upstream.bodies.at(-1)?.model).toBe("text-embedding-3-small");
      expect(embedded.data.model).toBe("hosted/text-embedding-3-small");
      const embeddedId = embedded.response.headers.get("x-request-id");
      expect(sluice.ledgerRows().find((row) => row.request_id === embeddedId)?.model).toBe("hosted/text-embedding-3-small");
    });
  });

  test("an exact id wins, then the longest prefix; the prefix alone is no model", async () => {
    await withSluice(config(), async (sluice) => {
      const client = sluice.client();
      await client.chat.completions.create({ model: "hosted/usage-1-1", messages: question });
      // The model of that exact id, with its own upstream name.
      expect(upstream.bodies.at(-1)?.model).toBe("usage-3-3");
      await client.chat.completions.create({ model: "hosted/special/usage-2-2", messages: question });
      expect(upstream.bodies.at(-1)?.model).toBe("usage-2-2");
      expect(upstream.requests.at(-1)?.path).toBe("/v1/chat/completions?server=special");
      // A name the upstream does not have is the caller's unknown model (its 404), not a server error.
      const unknown = await failureOf(client.chat.completions.create({ model: "hosted/no-such-model", messages: question }));
      expect([unknown.status, unknown.code, unknown.param]).toEqual([404, "model_not_found", "model"]);
      expect(upstream.bodies.at(-1)?.model).toBe("no-such-model");
      // A name of 256 characters after the prefix is taken; a longer one is no model (each becomes the ledger's model).
      const long = await failureOf(client.chat.completions.create({ model: `hosted/${"x".repeat(256)}`, messages: question }));
      expect(long.status).toBe(404);
      expect(upstream.bodies.at(-1)?.model).toBe("x".repeat(256));
      const calls = upstream.requests.length;
      for (const name of ["hosted/", "hosted", "other/usage-1-1", `hosted/${"x".repeat(257)}`]) {
        const refused = await failureOf(client.chat.completions.create({ model: name, messages: question }));
        expect([refused.status, refused.code]).toEqual([404, "model_not_found"]);
      }
      // Refused by Sluice itself: the upstream never heard of them.
      expect(upstream.requests.length).toBe(calls);
    });
  });

  test("plans and keys name it by its id; /v1/models lists it, and retrieves a name under it as a model", async () => {
    await withSluice(config(), async (sluice) => {
      const listed = await sluice.client().models.list();
      expect(listed.data.map((model) => model.id)).toContain("hosted/*");
      const retrieved = await sluice.client().models.retrieve("hosted/some-model");
      expect(retrieved.id).toBe("hosted/some-model");
      // A key limited to the prefix model reaches every name under it, and nothing else.
      const organization = await sluice.organizations.findByName("acme");
      const limited = await sluice.keys.create({ organizationId: organization?.id as string, name: "hosted only", models: ["hosted/*"] }, testActor);
      const client = sluice.client({ apiKey: limited.secret });
      await client.chat.completions.create({ model: "hosted/usage-10-5", messages: question });
      expect((await failureOf(client.chat.completions.create({ model: "local", messages: question }))).status).toBe(404);
      // A plan without it: its names are unknown.
      const other = await sluice.addOrganization("locals", { plan: "local-only" });
      const refused = await failureOf(sluice.client({ apiKey: other.key }).chat.completions.create({ model: "hosted/usage-10-5", messages: question }));
      expect([refused.status, refused.code]).toEqual([404, "model_not_found"]);
    });
  });

  test("the configuration refuses what a prefix model cannot be", () => {
    const model = (extra: Record<string, unknown>) => ({ models: [{ id: "hosted/*", backend: "openai", base_url: "http://127.0.0.1:1/v1", ...extra }] });
    const cases: [unknown, string][] = [
      [model({ id: "hosted*" }), 'models[0].id "hosted*": a * may only end an id, after a / and a prefix'],
      [model({ id: "/*" }), 'models[0].id "/*": a * may only end an id'],
      [model({ id: "*" }), 'models[0].id "*": a * may only end an id'],
      [model({ id: "a/*/b" }), 'models[0].id "a/*/b": a * may only end an id'],
      [model({ upstream_model: "x" }), "a prefix model sends each request's own name after the prefix upstream, so it takes no upstream_model"],
      [model({ aliases: ["h"] }), "a prefix model takes no aliases"],
      [
        {
          models: [
            { id: "hosted/*", backend: "openai", base_url: "http://127.0.0.1:1/v1" },
            { id: "m", backend: "openai", base_url: "http://127.0.0.1:1/v1", fallbacks: ["hosted/*"] },
          ],
        },
        'models "m": fallback "hosted/*" is a prefix model: a fallback must be one model',
      ],
    ];
    for (const [file, message] of cases) {
      expect(() => resolveConfig(file)).toThrow(ConfigError);
      expect(() => resolveConfig(file)).toThrow(message);
    }
    expect(resolveConfig(model({})).models[0]?.prefix).toBe("hosted/");
  });
});
