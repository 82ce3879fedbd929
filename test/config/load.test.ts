import { expect, test } from "bun:test";
import { ConfigError, resolveConfig } from "../../src/config/load";

test("no file: the built-in demo model and a default plan that includes it", () => {
  const config = resolveConfig({});
  expect(config.models.map((model) => [model.id, model.backend])).toEqual([["sluice-demo", "demo"]]);
  expect(config.plans).toEqual([{ id: "default", models: ["*"] }]);
});

test("defaults fill in every model field", () => {
  const [model] = resolveConfig({
    models: [{ id: "qwen", backend: "openai", base_url: "http://h:8000/v1/" }],
    plans: [{ id: "default", models: ["qwen"] }],
  }).models;
  expect(model).toMatchObject({ upstreamModel: "qwen", baseUrls: ["http://h:8000/v1"], enabled: true, timeoutMs: 600000, contextWindow: 32768 });
});

test("refused with the key named: unknown keys, wrong types, missing base_url, unknown plan models, duplicates", () => {
  const cases: [unknown, string][] = [
    [{ modles: [] }, "modles"],
    [{ models: [{ id: "a", backend: "demo", bse_url: "x" }] }, "models[0].bse_url"],
    [{ models: [{ id: "a", backend: "gpt" }] }, "models[0].backend"],
    [{ models: [{ id: "a", backend: "demo", timeout_ms: "10" }] }, "models[0].timeout_ms"],
    [{ models: [{ id: "a", backend: "openai" }] }, "models[0].base_url"],
    [{ models: [{ id: "a", backend: "demo" }], plans: [{ id: "p", models: ["b"] }] }, 'unknown model "b"'],
    [
      {
        models: [
          { id: "a", backend: "demo" },
          { id: "a", backend: "demo" },
        ],
      },
      'duplicate id "a"',
    ],
    [{ plans: [{ id: "p", models: ["*"], colour: "red" }] }, "plans[0].colour"],
    [
      {
        models: [
          { id: "a", backend: "demo" },
          { id: "b", backend: "demo", aliases: ["a"] },
        ],
      },
      'alias "a" is already the id of model "a"',
    ],
    [
      {
        models: [
          { id: "a", backend: "demo", aliases: ["x"] },
          { id: "b", backend: "demo", aliases: ["x"] },
        ],
      },
      'alias "x" is already an alias of model "a"',
    ],
    [{ models: [{ id: "a", backend: "demo", aliases: ["a"] }] }, 'alias "a" is already the id of model "a"'],
    [{ models: [{ id: "a", backend: "demo", aliases: [""] }] }, "models[0].aliases[0]"],
  ];
  for (const [file, named] of cases) {
    expect(() => resolveConfig(file)).toThrow(ConfigError);
    expect(() => resolveConfig(file)).toThrow(named);
  }
});
