import { expect, test } from "bun:test";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { checkKeyFiles } from "../../src/config/secrets";
import { temporaryDirectory } from "../helpers";
import { defaultSafetyRules } from "../../src/config/default-rules";
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
    [{ console: { signup: false } }, "console.signup"],
    [{ console: { sign_up: "no" } }, "console.sign_up"],
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

test("fallbacks: other models by id, each once; refused otherwise with the model and the fallback named", () => {
  const models = (fallbacks: string[]) => ({
    models: [
      { id: "a", backend: "demo", aliases: ["alpha"], fallbacks },
      { id: "b", backend: "demo", aliases: ["beta"] },
      { id: "c", backend: "demo" },
    ],
  });
  expect(resolveConfig(models(["c", "b"])).models.map((model) => model.fallbacks)).toEqual([["c", "b"], [], []]);
  const cases: [string[], string][] = [
    [["a"], 'models "a": fallback "a" is the model itself'],
    [["alpha"], 'models "a": fallback "alpha" is the model itself'],
    [["beta"], 'models "a": fallback "beta" is an alias: name the model by its id, "b"'],
    [["d"], 'models "a": fallback "d" is not a configured model'],
    [["b", "c", "b"], 'models "a": fallback "b" is listed twice'],
    [[""], "models[0].fallbacks[0]"],
  ];
  for (const [fallbacks, named] of cases) {
    expect(() => resolveConfig(models(fallbacks))).toThrow(ConfigError);
    expect(() => resolveConfig(models(fallbacks))).toThrow(named);
  }
});

test("context fallbacks: other models by id, each once, each with a larger context window; refused otherwise", () => {
  const models = (contextFallbacks: string[]) => ({
    models: [
      { id: "a", backend: "demo", aliases: ["alpha"], context_window: 8192, context_fallbacks: contextFallbacks },
      { id: "b", backend: "demo", aliases: ["beta"], context_window: 131_072 },
      { id: "c", backend: "demo", context_window: 8192 },
      { id: "d", backend: "demo", context_window: 65_536 },
    ],
  });
  expect(resolveConfig(models(["d", "b"])).models.map((model) => model.contextFallbacks)).toEqual([["d", "b"], [], [], []]);
  const cases: [string[], string][] = [
    [["a"], 'models "a": context fallback "a" is the model itself'],
    [["beta"], 'models "a": context fallback "beta" is an alias: name the model by its id, "b"'],
    [["e"], 'models "a": context fallback "e" is not a configured model'],
    [["b", "b"], 'models "a": context fallback "b" is listed twice'],
    [["c"], 'models "a": context fallback "c" has a context window of 8192, not larger than the model\'s 8192'],
  ];
  for (const [contextFallbacks, named] of cases) {
    expect(() => resolveConfig(models(contextFallbacks))).toThrow(ConfigError);
    expect(() => resolveConfig(models(contextFallbacks))).toThrow(named);
  }
});

test("refused with the key named: addresses fetch cannot call, durations past a timer's 32 bits, quotas past exact integers, two plans of one id", () => {
  const model = (fields: Record<string, unknown>) => ({ models: [{ id: "a", backend: "openai", base_url: "http://127.0.0.1:8000/v1", ...fields }] });
  const cases: [unknown, string][] = [
    [model({ base_url: "ftp://models.internal/v1" }), 'models[0].base_url: expected an http:// or https:// URL, got "ftp://models.internal/v1"'],
    [model({ base_url: "models.internal:8000/v1" }), "models[0].base_url: expected an http:// or https:// URL"],
    [model({ base_url: ["http://a:8000/v1", "not a url"] }), 'models[0].base_url[1]: expected an http:// or https:// URL, got "not a url"'],
    [{ safety: { moderation_url: "javascript:alert(1)" } }, "safety.moderation_url: expected an http:// or https:// URL"],
    // 2^31 ms: Bun would fire such a timer at once, and every request would time out.
    ...["timeout_ms", "queue_timeout_ms", "first_byte_timeout_ms", "idle_timeout_ms", "breaker_cooldown_ms", "health_check_ms", "stream_delay_ms"].map(
      (key): [unknown, string] => [model({ [key]: 2 ** 31 }), `models[0].${key}`],
    ),
    [{ safety: { timeout_ms: 2 ** 31 } }, "safety.timeout_ms"],
    [model({ breaker_failure_rate: 1.5 }), "models[0].breaker_failure_rate"],
    [model({ breaker_failure_rate: -0.1 }), "models[0].breaker_failure_rate"],
    [model({ breaker_window: 1 }), "models[0].breaker_window"],
    [model({ health_check_ms: -1 }), "models[0].health_check_ms"],
    [model({ breaker_window: 10.5 }), "models[0].breaker_window"],
    [model({ routing: "random" }), "models[0].routing"],
    [model({ affinity_slack: -1 }), "models[0].affinity_slack"],
    [model({ health_check_path: "health" }), "models[0].health_check_path"],
    [model({ health_check_path: "/health?ready=1" }), "models[0].health_check_path"],
    [model({ quota_weight: 0 }), "models[0].quota_weight"],
    [model({ quota_weight: -1 }), "models[0].quota_weight"],
    [model({ quota_weight: 1001 }), "models[0].quota_weight"],
    [model({ quota_weight: 0.0005 }), "models[0].quota_weight: at most three decimals"],
    [model({ quota_weight: "2" }), "models[0].quota_weight"],
    [{ plans: [{ id: "p", models: ["*"], tokens_per_month: 2 ** 53 }] }, "plans[0].tokens_per_month"],
    [{ plans: [{ id: "p", models: ["*"], tokens_per_5h: 1e300 }] }, "plans[0].tokens_per_5h"],
    [{ plans: [{ id: "p", models: ["*"], queue_weight: 0 }] }, "plans[0].queue_weight"],
    [{ plans: [{ id: "p", models: ["*"], queue_weight: 101 }] }, "plans[0].queue_weight"],
    [{ plans: [{ id: "p", models: ["*"], requests_per_minute: 0 }] }, "plans[0].requests_per_minute"],
    [{ plans: [{ id: "p", models: ["*"], requests_per_minute: 1_000_001 }] }, "plans[0].requests_per_minute"],
    [{ plans: [{ id: "p", models: ["*"], requests_per_minute: 2.5 }] }, "plans[0].requests_per_minute"],
    [
      {
        plans: [
          { id: "p", models: ["*"] },
          { id: "p", models: ["*"], tokens_per_month: 10 },
        ],
      },
      'plans: duplicate id "p"',
    ],
  ];
  for (const [file, named] of cases) {
    expect(() => resolveConfig(file)).toThrow(ConfigError);
    expect(() => resolveConfig(file)).toThrow(named);
  }
  // The largest of each is taken.
  const largest = resolveConfig({
    ...model({ base_url: ["https://a/v1", "http://[::1]:8000/v1"], timeout_ms: 2 ** 31 - 1, stream_delay_ms: 0 }),
    plans: [{ id: "p", models: ["*"], tokens_per_month: Number.MAX_SAFE_INTEGER, requests_per_minute: 1_000_000 }],
  });
  expect(largest.models[0]?.timeoutMs).toBe(2 ** 31 - 1);
  // A failure rate of 0 turns the rate off; the defaults take a server out at half of its last 20 calls.
  expect(resolveConfig(model({ breaker_failure_rate: 0, breaker_window: 1000 })).models[0]).toMatchObject({ breakerFailureRate: 0, breakerWindow: 1000 });
  expect(resolveConfig(model({})).models[0]).toMatchObject({
    breakerFailureRate: 0.5,
    breakerWindow: 20,
    routing: "least_busy",
    affinitySlack: 4,
    healthCheckMs: 5000,
    quotaWeight: 1,
  });
  expect(resolveConfig(model({ quota_weight: 0.001 })).models[0]?.quotaWeight).toBe(0.001);
  expect(resolveConfig(model({ quota_weight: 1000 })).models[0]?.quotaWeight).toBe(1000);
  expect(resolveConfig(model({ quota_weight: 0.07 })).models[0]?.quotaWeight).toBe(0.07);
  expect(resolveConfig(model({ health_check_ms: 0 })).models[0]?.healthCheckMs).toBe(0);
  expect(resolveConfig(model({ routing: "affinity", affinity_slack: 0 })).models[0]).toMatchObject({ routing: "affinity", affinitySlack: 0 });
  expect(largest.plans[0]?.tokensPerMonth).toBe(Number.MAX_SAFE_INTEGER);
  expect(largest.plans[0]?.requestsPerMinute).toBe(1_000_000);
});

test("a red-line pattern that repeats a group holding a repetition is refused, with the rule and the pattern named; the shipped rules and common shapes pass", () => {
  const rules = (patterns: string[]) => ({ safety: { rules: [{ id: "R", name: "rule", patterns }] } });
  for (const pattern of ["(a+)+$", "(?i)(\\w+\\s?)+!", "(\\s*\\w+)*", "(.*a){20}", "((ab)*c)+"]) {
    expect(() => resolveConfig(rules(["\\bfine\\b", pattern]))).toThrow("safety.rules[0].patterns[1]");
    expect(() => resolveConfig(rules(["\\bfine\\b", pattern]))).toThrow("exponential time");
  }
  const accepted = [
    "(?i)\\b(nerve agents?|precursors?|recipes?|steps?|guides?|manuals?|methods?|ways?|plans?|tools?|kits?|parts?|designs?|labs?|routes?)\\b",
    "(?i)\\b(how to|instructions? (for|to))\\b[^.?!]{0,60}\\b(bomb a|mass shooting)\\b",
    "[a-z0-9._%+-]+@[a-z0-9.-]+\\.[a-z]{2,}",
    "\\b\\d{3}-\\d{2}-\\d{4}\\b",
  ];
  expect(resolveConfig(rules(accepted)).safety.rules[0]?.patterns).toHaveLength(accepted.length);
  // The shipped rules, written in the file as an operator's own (without [safety] they are not checked at start).
  expect(resolveConfig({ safety: { rules: defaultSafetyRules } }).safety.rules).toHaveLength(defaultSafetyRules.length);
});

test("a model's upstream headers: names in lower case; the key's own header needs api_key_env; what Sluice sets, the key, and line breaks are refused", () => {
  const model = (fields: Record<string, unknown>) => ({ models: [{ id: "a", backend: "openai", base_url: "http://127.0.0.1:8000/v1", ...fields }] });
  const [azure] = resolveConfig(
    model({ api_key_env: "AZURE_KEY", api_key_header: "Api-Key", headers: { "X-Title": "Sluice", "HTTP-Referer": "https://example.com" } }),
  ).models;
  expect(azure).toMatchObject({ apiKeyHeader: "api-key", headers: { "x-title": "Sluice", "http-referer": "https://example.com" } });
  expect(resolveConfig(model({})).models[0]).toMatchObject({ apiKeyHeader: undefined, headers: {} });
  const cases: [unknown, string][] = [
    [model({ api_key_header: "api-key" }), "models[0].api_key_header: it needs api_key_env"],
    [model({ api_key_env: "K", api_key_header: "Content-Type" }), 'models[0].api_key_header: "Content-Type" is not a header the key can go in'],
    [model({ api_key_env: "K", api_key_header: "api key" }), "models[0].api_key_header"],
    [model({ headers: { Authorization: "Bearer sk-in-the-file" } }), "models[0].headers.Authorization: the key goes through api_key_env"],
    [model({ api_key_env: "K", api_key_header: "api-key", headers: { "API-KEY": "x" } }), "models[0].headers.API-KEY: the key goes through api_key_env"],
    [model({ headers: { "Accept-Encoding": "gzip" } }), "models[0].headers.Accept-Encoding: Sluice sets this header itself"],
    [model({ headers: { Host: "elsewhere" } }), "models[0].headers.Host: Sluice sets this header itself"],
    [model({ headers: { "x title": "a" } }), "models[0].headers.x title: not a valid header name"],
    [model({ headers: { "x-title": "a\r\nx-injected: 1" } }), "models[0].headers.x-title: a header value cannot hold a line break"],
    [model({ headers: { "X-Title": "a", "x-title": "b" } }), "the header is given twice"],
    [model({ headers: { "x-count": 3 } }), "models[0].headers.x-count"],
    [model({ api_key_env: "K", api_key_file: "/run/secrets/k" }), "models[0].api_key_file: give models[0].api_key_env or models[0].api_key_file, not both"],
    [
      { safety: { moderation_url: "http://127.0.0.1:9/v1/moderations", moderation_api_key_env: "K", moderation_api_key_file: "/run/secrets/k" } },
      "safety.moderation_api_key_file: give",
    ],
  ];
  // A file where the key is: the header may carry it too. The file is the server's to read (checkKeyFiles), not the
  // configuration's, so a command run by a user who cannot read it still works.
  expect(resolveConfig(model({ api_key_file: "/nowhere/key", api_key_header: "api-key" })).models[0]).toMatchObject({
    apiKeyFile: "/nowhere/key",
    apiKeyEnv: undefined,
    apiKeyHeader: "api-key",
  });
  expect(() => checkKeyFiles(resolveConfig(model({ api_key_file: "/nowhere/key" })))).toThrow(
    "invalid configuration key models[0].api_key_file: cannot read /nowhere/key (ENOENT)",
  );
  // A directory, a file far larger than a key, or two lines: each named.
  const directory = temporaryDirectory();
  try {
    const large = join(directory.path, "large");
    writeFileSync(large, "x".repeat(20_000));
    const twoLines = join(directory.path, "two-lines");
    writeFileSync(twoLines, "sk-one\nsk-two\n");
    for (const [file, message] of [
      [directory.path, "(EISDIR)"],
      [large, "is larger than 16384 bytes"],
      [twoLines, "holds more than one line"],
    ] as const) {
      expect(() => checkKeyFiles(resolveConfig(model({ api_key_file: file })))).toThrow(message);
    }
  } finally {
    directory.remove();
  }
  for (const [file, named] of cases) {
    expect(() => resolveConfig(file)).toThrow(ConfigError);
    expect(() => resolveConfig(file)).toThrow(named);
  }
});

test("[console] sign_up: open unless set to false", () => {
  expect(resolveConfig({}).console).toEqual({ signUp: true, sso: undefined, networks: undefined });
  expect(resolveConfig({ console: { sign_up: false } }).console).toEqual({ signUp: false, sso: undefined, networks: undefined });
});
