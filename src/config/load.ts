import { existsSync, readFileSync } from "node:fs";
import { Value } from "@sinclair/typebox/value";
import { defaultConfigFile, modelDefaults } from "./defaults";
import { ConfigFileSchema, type Config, type ConfigFile, type ModelConfig } from "./schema";

export class ConfigError extends Error {
  override name = "ConfigError";
}

/** Turns a TypeBox path such as `/models/0/base_url` into `models[0].base_url`, as an operator reads it. */
function readablePath(path: string): string {
  return path
    .split("/")
    .filter(Boolean)
    .map((part, index) => (/^\d+$/.test(part) ? `[${part}]` : index === 0 ? part : `.${part}`))
    .join("");
}

/** Checks a parsed config file against the schema and fills in defaults; throws ConfigError naming the key. */
export function resolveConfig(file: unknown): Config {
  const firstError = Value.Errors(ConfigFileSchema, file).First();
  if (firstError) {
    const where = readablePath(firstError.path) || "(top level)";
    const unknownKey = firstError.message.includes("Unexpected property");
    throw new ConfigError(unknownKey ? `unknown configuration key: ${where}` : `invalid configuration key ${where}: ${firstError.message}`);
  }
  const checked = file as ConfigFile;
  const models: ModelConfig[] = (checked.models ?? defaultConfigFile.models ?? []).map((model, index) => {
    if (model.backend === "openai" && !model.base_url) throw new ConfigError(`models[${index}].base_url is required for backend "openai"`);
    const contextWindow = model.context_window ?? modelDefaults.contextWindow;
    return {
      id: model.id,
      backend: model.backend,
      baseUrl: model.base_url?.replace(/\/+$/, ""),
      upstreamModel: model.upstream_model ?? model.id,
      apiKeyEnv: model.api_key_env,
      ownedBy: model.owned_by ?? "sluice",
      contextWindow,
      maxOutputTokens: Math.min(model.max_output_tokens ?? modelDefaults.maxOutputTokens, contextWindow),
      enabled: model.enabled ?? true,
      timeoutMs: model.timeout_ms ?? modelDefaults.timeoutMs,
      streamDelayMs: model.stream_delay_ms ?? modelDefaults.streamDelayMs,
      maxConcurrency: model.max_concurrency,
      queueSize: model.queue_size ?? modelDefaults.queueSize,
      queueTimeoutMs: model.queue_timeout_ms ?? modelDefaults.queueTimeoutMs,
    };
  });
  const seen = new Set<string>();
  for (const model of models) {
    if (seen.has(model.id)) throw new ConfigError(`models: duplicate id "${model.id}"`);
    seen.add(model.id);
  }
  const plans = checked.plans ?? defaultConfigFile.plans ?? [];
  for (const plan of plans) {
    for (const modelId of plan.models) {
      if (modelId !== "*" && !seen.has(modelId)) throw new ConfigError(`plans "${plan.id}": unknown model "${modelId}"`);
    }
  }
  return {
    models,
    plans: plans.map((plan) => ({
      id: plan.id,
      models: plan.models,
      tokensPer5h: plan.tokens_per_5h,
      tokensPerMonth: plan.tokens_per_month,
      maxConcurrency: plan.max_concurrency,
    })),
  };
}

/** Reads SLUICE_CONFIG (default data/sluice.toml); when the file is absent the built-in defaults apply. */
export function loadConfig(path = process.env.SLUICE_CONFIG ?? "data/sluice.toml"): Config {
  if (!existsSync(path)) return resolveConfig(defaultConfigFile);
  let parsed: unknown;
  try {
    parsed = Bun.TOML.parse(readFileSync(path, "utf8"));
  } catch (error) {
    throw new ConfigError(`${path}: not valid TOML: ${(error as Error).message}`);
  }
  return resolveConfig(parsed);
}
