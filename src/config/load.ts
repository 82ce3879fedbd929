import { existsSync, readFileSync } from "node:fs";
import { Value } from "@sinclair/typebox/value";
import { defaultConfigFile, modelDefaults } from "./defaults";
import { defaultSafetyRules } from "./default-rules";
import { paramOf } from "../validation";
import { checkNetworks, NetworkListError } from "../modules/keys/networks";
import {
  ConfigFileSchema,
  type Config,
  type ConfigFile,
  type ModelConfig,
  type ModelConfigFile,
  type SafetyConfig,
  type SsoConfig,
  type SsoConfigFile,
} from "./schema";

export class ConfigError extends Error {
  override name = "ConfigError";
}

/**
 * A pattern as operators write it: JavaScript syntax, where a leading `(?i)` (PCRE, Python) means case-insensitive.
 * The `u` flag is added only when the pattern needs it (`\p{…}`, `\u{…}`): without it, matching is several times
 * faster, and the output check runs on every streamed chunk.
 */
export function compilePattern(pattern: string): RegExp {
  const caseless = pattern.startsWith("(?i)");
  const source = caseless ? pattern.slice(4) : pattern;
  const unicode = /\\[pP]\{|\\u\{/.test(source);
  return new RegExp(source, `${caseless ? "i" : ""}${unicode ? "u" : ""}`);
}

/**
 * A pattern is matched against every prompt by a backtracking engine: one with a repetition inside a repeated group,
 * such as `(a+)+` or `(\w+\s?)*`, can take exponential time on a crafted prompt of a few dozen characters. Bun's
 * engine gives up after about half a second and answers "no match": the event loop, and so every request, held that
 * long, and the rule passed over. safe-regex2 (fastify's) finds that nesting; it does not find every
 * slow pattern (an alternation whose branches overlap, `(a|aa)+`, passes). Its count of repetitions is not used: a
 * long list of words with their plurals (`agents?`) is many repetitions and no risk.
 */
function checkPatternNesting(pattern: RegExp, where: string): void {
  // Loaded only for an operator's own rules (test/config/load.test.ts checks the shipped ones): loading it at every
  // start cost about 2 ms of start-up and 0.5 MB of idle memory.
  const isSafePattern = require("safe-regex2") as typeof import("safe-regex2");
  if (!isSafePattern(pattern, { limit: Number.POSITIVE_INFINITY })) {
    throw new ConfigError(
      `invalid configuration key ${where}: /${pattern.source}/ repeats a group that itself holds a repetition (as (a+)+ does), which can take exponential time on a crafted prompt: every request held for about half a second each time, and the rule passed over; write it without the nesting`,
    );
  }
}

/** An upstream's or the checker's address: fetch takes http and https only, so anything else would fail every request. */
function checkHttpUrl(value: string, where: string): void {
  let protocol: string | undefined;
  try {
    protocol = new URL(value).protocol;
  } catch {
    protocol = undefined;
  }
  if (protocol !== "http:" && protocol !== "https:")
    throw new ConfigError(`invalid configuration key ${where}: expected an http:// or https:// URL, got "${value}"`);
}

/** Headers Sluice writes itself on every upstream call: a model's `headers` may not replace them. */
const reservedHeaders = new Set([
  "content-type",
  "content-length",
  "accept",
  "accept-encoding",
  "host",
  "connection",
  "transfer-encoding",
  "te",
  "upgrade",
  "x-request-id",
  "traceparent",
  "tracestate",
]);
/** RFC 9110's token: what a header name may be made of. */
const headerName = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;

/** Where a key comes from: a variable or a file (read by the server only: see checkKeyFiles), not both. */
function keySource(env: string | undefined, file: string | undefined, where: string): { apiKeyEnv: string | undefined; apiKeyFile: string | undefined } {
  if (env !== undefined && file !== undefined) throw new ConfigError(`invalid configuration key ${where}_file: give ${where}_env or ${where}_file, not both`);
  return { apiKeyEnv: env, apiKeyFile: file };
}

/** A model's `api_key_header` and `headers`, checked: names that fetch would refuse, or that Sluice sets, are refused here. */
function upstreamHeadersOf(model: ModelConfigFile, where: string): Pick<ModelConfig, "apiKeyHeader" | "headers"> {
  const apiKeyHeader = model.api_key_header?.toLowerCase();
  if (apiKeyHeader !== undefined) {
    if (!headerName.test(apiKeyHeader) || reservedHeaders.has(apiKeyHeader))
      throw new ConfigError(`invalid configuration key ${where}.api_key_header: "${model.api_key_header}" is not a header the key can go in`);
    if (!model.api_key_env && !model.api_key_file)
      throw new ConfigError(`invalid configuration key ${where}.api_key_header: it needs api_key_env or api_key_file, where the key is`);
  }
  const headers: Record<string, string> = {};
  for (const [name, value] of Object.entries(model.headers ?? {})) {
    const lower = name.toLowerCase();
    const key = `${where}.headers.${name}`;
    if (!headerName.test(name)) throw new ConfigError(`invalid configuration key ${key}: not a valid header name`);
    if (reservedHeaders.has(lower)) throw new ConfigError(`invalid configuration key ${key}: Sluice sets this header itself`);
    if (lower === "authorization" || lower === apiKeyHeader)
      throw new ConfigError(`invalid configuration key ${key}: the key goes through api_key_env or api_key_file (and api_key_header), never in the file`);
    if (/[\r\n\0]/.test(value)) throw new ConfigError(`invalid configuration key ${key}: a header value cannot hold a line break`);
    if (lower in headers) throw new ConfigError(`invalid configuration key ${key}: the header is given twice`);
    headers[lower] = value;
  }
  return { apiKeyHeader, headers };
}

function resolveSafety(safety: ConfigFile["safety"]): SafetyConfig {
  if (safety?.moderation_url) checkHttpUrl(safety.moderation_url, "safety.moderation_url");
  const rules = (safety?.rules ?? defaultSafetyRules).map((rule, ruleIndex) => ({
    appliesTo: { input: (rule.applies_to ?? ["input"]).includes("input"), output: (rule.applies_to ?? ["output"]).includes("output") },
    id: rule.id,
    name: rule.name,
    patterns: (rule.patterns ?? []).map((pattern, patternIndex) => {
      const where = `safety.rules[${ruleIndex}].patterns[${patternIndex}]`;
      let compiled: RegExp;
      try {
        compiled = compilePattern(pattern);
      } catch (error) {
        throw new ConfigError(`invalid configuration key ${where}: ${(error as Error).message}`);
      }
      if (safety?.rules) checkPatternNesting(compiled, where);
      return compiled;
    }),
    categories: rule.categories ?? [],
  }));
  const ids = new Set<string>();
  for (const rule of rules) {
    if (ids.has(rule.id)) throw new ConfigError(`safety.rules: duplicate id "${rule.id}"`);
    ids.add(rule.id);
  }
  return {
    enabled: safety?.enabled ?? true,
    timeoutMs: safety?.timeout_ms ?? 2000,
    moderation: safety?.moderation_url
      ? {
          url: safety.moderation_url,
          model: safety.moderation_model,
          ...keySource(safety.moderation_api_key_env, safety.moderation_api_key_file, "safety.moderation_api_key"),
          moderateOutput: safety.moderate_output ?? false,
        }
      : undefined,
    rules,
  };
}

/**
 * A model's fallbacks and context fallbacks name other models by id, each once; a context fallback has a larger
 * context window. An alias is refused with the id it stands for, so that the file says which model takes over. A
 * fallback's own fallbacks are not followed, so no chain can loop.
 */
function checkFallbacks(models: ModelConfig[]): void {
  const byAlias = new Map(models.flatMap((model) => model.aliases.map((alias) => [alias, model.id] as const)));
  const byId = new Map(models.map((model) => [model.id, model]));
  for (const model of models) {
    for (const [key, list] of [
      ["fallback", model.fallbacks],
      ["context fallback", model.contextFallbacks],
    ] as const) {
      const listed = new Set<string>();
      for (const fallback of list) {
        const where = `models "${model.id}": ${key} "${fallback}"`;
        const aliased = byAlias.get(fallback);
        if (fallback === model.id || aliased === model.id) throw new ConfigError(`${where} is the model itself`);
        if (aliased !== undefined) throw new ConfigError(`${where} is an alias: name the model by its id, "${aliased}"`);
        const target = byId.get(fallback);
        if (!target) throw new ConfigError(`${where} is not a configured model`);
        if (target.prefix !== undefined) throw new ConfigError(`${where} is a prefix model: a fallback must be one model`);
        if (listed.has(fallback)) throw new ConfigError(`${where} is listed twice`);
        // It would never take a request: one too long for this model is too long for it.
        if (list === model.contextFallbacks && target.contextWindow <= model.contextWindow) {
          throw new ConfigError(`${where} has a context window of ${target.contextWindow}, not larger than the model's ${model.contextWindow}`);
        }
        listed.add(fallback);
      }
    }
  }
}

/** `[console] networks`, checked as a key's are (addresses or CIDR ranges, one to fifty). */
function consoleNetworksOf(networks: string[] | undefined): string[] | undefined {
  if (networks === undefined) return undefined;
  try {
    return checkNetworks(networks) ?? undefined;
  } catch (error) {
    if (error instanceof NetworkListError) throw new ConfigError(`invalid configuration key console.networks: ${error.message}`);
    throw error;
  }
}

/** The path every console's single sign-on callback has (see src/modules/console/index.ts). */
export const ssoCallbackPath = "/console/api/sso/callback";

/** `[console.sso]`, checked: URLs fetch can call, a callback at the console's path, one place for the secret. */
function ssoOf(sso: SsoConfigFile | undefined): SsoConfig | undefined {
  if (sso === undefined) return undefined;
  checkHttpUrl(sso.issuer, "console.sso.issuer");
  checkHttpUrl(sso.redirect_url, "console.sso.redirect_url");
  if (new URL(sso.redirect_url).pathname !== ssoCallbackPath) {
    throw new ConfigError(`invalid configuration key console.sso.redirect_url: it must end in ${ssoCallbackPath}, the console's callback`);
  }
  const { apiKeyEnv, apiKeyFile } = keySource(sso.client_secret_env, sso.client_secret_file, "console.sso.client_secret");
  if (apiKeyEnv === undefined && apiKeyFile === undefined) {
    throw new ConfigError("console.sso: client_secret_env or client_secret_file is required (the console is a confidential client)");
  }
  return {
    issuer: sso.issuer.replace(/\/+$/, ""),
    clientId: sso.client_id,
    clientSecret: { env: apiKeyEnv, file: apiKeyFile },
    redirectUrl: sso.redirect_url,
    allowedDomains: (sso.allowed_domains ?? []).map((domain) => domain.toLowerCase()),
    label: sso.label ?? "Sign in with single sign-on",
    passwords: sso.passwords ?? true,
    organization: sso.organization,
  };
}

/** A model's quota weight: thousandths at most, so that what a request counts is exact (see quotaTokens). */
function quotaWeightOf(weight: number | undefined, where: string): number {
  if (weight === undefined) return modelDefaults.quotaWeight;
  if (Math.abs(weight * 1000 - Math.round(weight * 1000)) > 1e-6)
    throw new ConfigError(`invalid configuration key ${where}: at most three decimals (0.001 to 1000)`);
  return weight;
}

/**
 * The prefix of a model whose id ends in `/*` (`openrouter/*`: every model of a hosted API that names its models
 * `vendor/name`); undefined for any other id. A `*` anywhere else, an id that is `*` or `/*` alone, and the settings
 * that name a single upstream model (`upstream_model`, aliases) are refused.
 */
function prefixOf(model: ModelConfigFile, index: number): string | undefined {
  const where = `models[${index}].id "${model.id}"`;
  const star = model.id.indexOf("*");
  if (star === -1) return undefined;
  if (star !== model.id.length - 1 || !model.id.endsWith("/*") || model.id.length < 3) {
    throw new ConfigError(`${where}: a * may only end an id, after a / and a prefix (as in "openrouter/*")`);
  }
  if (model.upstream_model !== undefined) {
    throw new ConfigError(`${where}: a prefix model sends each request's own name after the prefix upstream, so it takes no upstream_model`);
  }
  if ((model.aliases ?? []).length > 0) throw new ConfigError(`${where}: a prefix model takes no aliases`);
  return model.id.slice(0, -1);
}

/** Checks a parsed config file against the schema and fills in defaults; throws ConfigError naming the key. */
export function resolveConfig(file: unknown): Config {
  // Check first: walking the errors of a valid file took ~6 ms of start-up.
  const firstError = Value.Check(ConfigFileSchema, file) ? undefined : Value.Errors(ConfigFileSchema, file).First();
  if (firstError) {
    const where = paramOf(firstError.path) || "(top level)";
    const unknownKey = firstError.message.includes("Unexpected property");
    throw new ConfigError(unknownKey ? `unknown configuration key: ${where}` : `invalid configuration key ${where}: ${firstError.message}`);
  }
  const checked = file as ConfigFile;
  const models: ModelConfig[] = (checked.models ?? defaultConfigFile.models ?? []).map((model, index) => {
    if (model.backend === "openai" && !model.base_url) throw new ConfigError(`models[${index}].base_url is required for backend "openai"`);
    if (typeof model.base_url === "string") checkHttpUrl(model.base_url, `models[${index}].base_url`);
    else for (const [position, url] of (model.base_url ?? []).entries()) checkHttpUrl(url, `models[${index}].base_url[${position}]`);
    const contextWindow = model.context_window ?? modelDefaults.contextWindow;
    const prefix = prefixOf(model, index);
    return {
      id: model.id,
      prefix,
      aliases: model.aliases ?? [],
      fallbacks: model.fallbacks ?? [],
      contextFallbacks: model.context_fallbacks ?? [],
      backend: model.backend,
      baseUrls: (typeof model.base_url === "string" ? [model.base_url] : (model.base_url ?? [])).map((url) => url.replace(/\/+$/, "")),
      // A prefix model's upstream name is each request's own, after the prefix (see prepareRequest).
      upstreamModel: model.upstream_model ?? model.id,
      ...keySource(model.api_key_env, model.api_key_file, `models[${index}].api_key`),
      ...upstreamHeadersOf(model, `models[${index}]`),
      ownedBy: model.owned_by ?? "sluice",
      contextWindow,
      maxOutputTokens: Math.min(model.max_output_tokens ?? modelDefaults.maxOutputTokens, contextWindow),
      maxTokensField: model.max_tokens_field,
      quotaWeight: quotaWeightOf(model.quota_weight, `models[${index}].quota_weight`),
      enabled: model.enabled ?? true,
      timeoutMs: model.timeout_ms ?? modelDefaults.timeoutMs,
      streamDelayMs: model.stream_delay_ms ?? modelDefaults.streamDelayMs,
      maxConcurrency: model.max_concurrency,
      queueSize: model.queue_size ?? modelDefaults.queueSize,
      queueTimeoutMs: model.queue_timeout_ms ?? modelDefaults.queueTimeoutMs,
      firstByteTimeoutMs: model.first_byte_timeout_ms,
      idleTimeoutMs: model.idle_timeout_ms,
      breakerFailures: model.breaker_failures ?? modelDefaults.breakerFailures,
      breakerCooldownMs: model.breaker_cooldown_ms ?? modelDefaults.breakerCooldownMs,
      healthCheckMs: model.health_check_ms ?? modelDefaults.healthCheckMs,
      healthCheckPath: model.health_check_path,
      breakerFailureRate: model.breaker_failure_rate ?? modelDefaults.breakerFailureRate,
      breakerWindow: model.breaker_window ?? modelDefaults.breakerWindow,
      routing: model.routing ?? modelDefaults.routing,
      affinitySlack: model.affinity_slack ?? modelDefaults.affinitySlack,
    };
  });
  const seen = new Set<string>();
  for (const model of models) {
    if (seen.has(model.id)) throw new ConfigError(`models: duplicate id "${model.id}"`);
    seen.add(model.id);
  }
  // An alias must name one model only: neither another model's id nor anyone's alias (its own id included).
  const named = new Map(models.map((model) => [model.id, `the id of model "${model.id}"`]));
  for (const model of models) {
    for (const alias of model.aliases) {
      const taken = named.get(alias);
      if (taken) throw new ConfigError(`models "${model.id}": alias "${alias}" is already ${taken}`);
      named.set(alias, `an alias of model "${model.id}"`);
    }
  }
  checkFallbacks(models);
  const plans = checked.plans ?? defaultConfigFile.plans ?? [];
  const planIds = new Set<string>();
  for (const plan of plans) {
    // Organizations name their plan by id: with two of one id, which limits apply would be the file's order.
    if (planIds.has(plan.id)) throw new ConfigError(`plans: duplicate id "${plan.id}"`);
    planIds.add(plan.id);
    for (const modelId of plan.models) {
      if (modelId !== "*" && !seen.has(modelId)) throw new ConfigError(`plans "${plan.id}": unknown model "${modelId}"`);
    }
  }
  return {
    models,
    safety: resolveSafety(checked.safety),
    console: { signUp: checked.console?.sign_up ?? true, sso: ssoOf(checked.console?.sso), networks: consoleNetworksOf(checked.console?.networks) },
    ledger: { retentionDays: checked.ledger?.retention_days },
    plans: plans.map((plan) => ({
      id: plan.id,
      models: plan.models,
      tokensPer5h: plan.tokens_per_5h,
      tokensPerMonth: plan.tokens_per_month,
      maxConcurrency: plan.max_concurrency,
      requestsPerMinute: plan.requests_per_minute,
      queueWeight: plan.queue_weight,
    })),
  };
}

const defaultConfigPath = "data/sluice.toml";

/**
 * Reads SLUICE_CONFIG (default data/sluice.toml). When the default file is absent the built-in defaults apply (a
 * first `make run`); a file that SLUICE_CONFIG names must exist, or a typo in a unit file would start a server on
 * the demo model and the default plan.
 */
export function loadConfig(path = process.env.SLUICE_CONFIG || defaultConfigPath): Config {
  if (!existsSync(path)) {
    if (path !== defaultConfigPath) throw new ConfigError(`${path} does not exist (SLUICE_CONFIG names it; unset SLUICE_CONFIG for the built-in defaults)`);
    return resolveConfig(defaultConfigFile);
  }
  let parsed: unknown;
  try {
    parsed = Bun.TOML.parse(readFileSync(path, "utf8"));
  } catch (error) {
    throw new ConfigError(`${path}: not valid TOML: ${(error as Error).message}`);
  }
  return resolveConfig(parsed);
}
