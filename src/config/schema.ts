import { Type, type Static } from "@sinclair/typebox";
import type { SecretSource } from "./secrets";

const strict = { additionalProperties: false } as const;

/**
 * A duration in milliseconds. Timers hold 32 bits: a longer one fires at once (Bun sets it to 1 ms), so a
 * `timeout_ms` of 2^31 would time out every request rather than none.
 */
function milliseconds(minimum: number) {
  return Type.Integer({ minimum, maximum: 2 ** 31 - 1 });
}

/** A token quota: counted exactly in a double, as the ledger's sums are. */
const tokenQuota = Type.Integer({ minimum: 1, maximum: Number.MAX_SAFE_INTEGER });

/** Requests a minute: a million is far beyond any one organization, and keeps each request's share of a minute above 0.05 ms. */
export const requestRate = Type.Integer({ minimum: 1, maximum: 1_000_000 });

export const ModelConfigSchema = Type.Object(
  {
    id: Type.String({ minLength: 1, description: "What clients send as `model`; ending in /*, every name that begins with what comes before the *" }),
    /** Other names clients may send for this model (agents that insist on their own model names). */
    aliases: Type.Optional(Type.Array(Type.String({ minLength: 1 }))),
    /** Models (by id) tried in order when this one cannot take a request now: down, busy, or its queue full. */
    fallbacks: Type.Optional(Type.Array(Type.String({ minLength: 1 }))),
    /** Models (by id, each with a larger context window) tried in order for a request too long for this one. */
    context_fallbacks: Type.Optional(Type.Array(Type.String({ minLength: 1 }))),
    backend: Type.Union([Type.Literal("openai"), Type.Literal("demo")]),
    /** One upstream, or several: each call to the least busy healthy one. */
    base_url: Type.Optional(Type.Union([Type.String({ minLength: 1 }), Type.Array(Type.String({ minLength: 1 }), { minItems: 1 })])),
    upstream_model: Type.Optional(Type.String({ minLength: 1 })),
    api_key_env: Type.Optional(Type.String({ minLength: 1 })),
    /** A file holding the key (a Docker or Kubernetes secret), read at start, at every reload and when it changes; instead of api_key_env. */
    api_key_file: Type.Optional(Type.String({ minLength: 1 })),
    /** The header the key goes in, as its bare value (Azure OpenAI's `api-key`); omitted = `Authorization: Bearer`. */
    api_key_header: Type.Optional(Type.String({ minLength: 1 })),
    /** Headers sent with every call to the model's servers (OpenRouter's `HTTP-Referer`, a proxy's routing header). */
    headers: Type.Optional(Type.Record(Type.String(), Type.String())),
    owned_by: Type.Optional(Type.String()),
    context_window: Type.Optional(Type.Integer({ minimum: 1 })),
    max_output_tokens: Type.Optional(Type.Integer({ minimum: 1 })),
    /** What each of its tokens counts against the token quotas (a large model's more than a small one's); default 1. */
    quota_weight: Type.Optional(Type.Number({ exclusiveMinimum: 0, maximum: 1000 })),
    /** The name the output limit is sent upstream under; omitted = the caller's name (max_tokens when none). */
    max_tokens_field: Type.Optional(Type.Union([Type.Literal("max_tokens"), Type.Literal("max_completion_tokens")])),
    enabled: Type.Optional(Type.Boolean()),
    timeout_ms: Type.Optional(milliseconds(1)),
    /** Demo backend only: pause between streamed tokens. */
    stream_delay_ms: Type.Optional(milliseconds(0)),
    /** Requests in flight to this upstream; omitted = unlimited. */
    max_concurrency: Type.Optional(Type.Integer({ minimum: 1 })),
    /** Requests waiting beyond max_concurrency. */
    queue_size: Type.Optional(Type.Integer({ minimum: 0 })),
    /** Longest wait in the queue. */
    queue_timeout_ms: Type.Optional(milliseconds(1)),
    /** Longest wait for the upstream's status line (connection included). */
    first_byte_timeout_ms: Type.Optional(milliseconds(1)),
    /** Longest silence between two chunks of a streamed answer. */
    idle_timeout_ms: Type.Optional(milliseconds(1)),
    /** Consecutive failures that open an upstream's circuit breaker. */
    breaker_failures: Type.Optional(Type.Integer({ minimum: 1 })),
    /** How long an open breaker keeps an upstream out before one probe request is let through. */
    breaker_cooldown_ms: Type.Optional(milliseconds(1)),
    /** How often a server out for failures in a row is asked whether it answers again (GET …/models); 0 = never. */
    health_check_ms: Type.Optional(milliseconds(0)),
    /** What the health check asks for: a path from the server's root (vLLM's and SGLang's `/health`); omitted = …/models. */
    health_check_path: Type.Optional(Type.String({ pattern: "^/[^\\s?#]*$", maxLength: 200 })),
    /** The share of a server's last `breaker_window` calls that, failed, takes it out while another server is up; 0 = never. */
    breaker_failure_rate: Type.Optional(Type.Number({ minimum: 0, maximum: 1 })),
    /** How many of a server's last calls `breaker_failure_rate` is judged over. */
    breaker_window: Type.Optional(Type.Integer({ minimum: 2, maximum: 1000 })),
    /** How a call chooses among several servers: the least busy, or a conversation's own server (its prefix cache). */
    routing: Type.Optional(Type.Union([Type.Literal("least_busy"), Type.Literal("affinity")])),
    /** Calls in flight a conversation's server may have beyond the least busy one before a call goes there instead. */
    affinity_slack: Type.Optional(Type.Integer({ minimum: 0, maximum: 100_000 })),
  },
  strict,
);

export const PlanConfigSchema = Type.Object(
  {
    id: Type.String({ minLength: 1 }),
    models: Type.Array(Type.String({ minLength: 1 })),
    /** Rolling 5-hour window; omitted = unlimited. */
    tokens_per_5h: Type.Optional(tokenQuota),
    /** Calendar month in UTC; omitted = unlimited. */
    tokens_per_month: Type.Optional(tokenQuota),
    /** Requests in flight for one organization; omitted = unlimited. */
    max_concurrency: Type.Optional(Type.Integer({ minimum: 1 })),
    /** Requests one organization may start a minute (a whole minute's worth at once, then at that pace); omitted = unlimited. */
    requests_per_minute: Type.Optional(requestRate),
    /** Slots in a row an organization of this plan gets in its turn in a model's queue; default 1. */
    queue_weight: Type.Optional(Type.Integer({ minimum: 1, maximum: 100 })),
  },
  strict,
);

export const SafetyRuleSchema = Type.Object(
  {
    id: Type.String({ minLength: 1 }),
    name: Type.String({ minLength: 1 }),
    /** Regular expressions in JavaScript syntax; a leading `(?i)` means case-insensitive. */
    patterns: Type.Optional(Type.Array(Type.String({ minLength: 1 }))),
    /** Moderation categories that map to this rule. */
    categories: Type.Optional(Type.Array(Type.String({ minLength: 1 }))),
    applies_to: Type.Optional(Type.Array(Type.Union([Type.Literal("input"), Type.Literal("output")]), { minItems: 1 })),
  },
  strict,
);

export const SafetyConfigSchema = Type.Object(
  {
    enabled: Type.Optional(Type.Boolean()),
    timeout_ms: Type.Optional(milliseconds(1)),
    moderation_url: Type.Optional(Type.String({ minLength: 1 })),
    moderation_model: Type.Optional(Type.String({ minLength: 1 })),
    moderation_api_key_env: Type.Optional(Type.String({ minLength: 1 })),
    moderation_api_key_file: Type.Optional(Type.String({ minLength: 1 })),
    /** Also ask the external checker about whole (non-streamed) answers. */
    moderate_output: Type.Optional(Type.Boolean()),
    rules: Type.Optional(Type.Array(SafetyRuleSchema)),
  },
  strict,
);

/** Console sign-in through the company's OpenID Connect provider (see src/modules/console/sso.ts). */
export const SsoConfigSchema = Type.Object(
  {
    /** The provider's issuer; its discovery document is at `<issuer>/.well-known/openid-configuration`. */
    issuer: Type.String({ minLength: 1 }),
    client_id: Type.String({ minLength: 1 }),
    /** Where the client secret is: an environment variable, or a file (as a model's api_key_env / api_key_file). */
    client_secret_env: Type.Optional(Type.String({ minLength: 1 })),
    client_secret_file: Type.Optional(Type.String({ minLength: 1 })),
    /** The console's callback as registered at the provider: `https://<this console>/console/api/sso/callback`. */
    redirect_url: Type.String({ minLength: 1 }),
    /** Only emails of these domains sign in; omitted: any the provider vouches for. */
    allowed_domains: Type.Optional(Type.Array(Type.String({ pattern: "^[A-Za-z0-9-]+(\\.[A-Za-z0-9-]+)+$" }))),
    /** The sign-in button's text. */
    label: Type.Optional(Type.String({ minLength: 1, maxLength: 100 })),
    /** false: single sign-on only (no password sign-in or sign-up); console tokens still work. Default true. */
    passwords: Type.Optional(Type.Boolean()),
    /** The organization (by name) that a verified email without an account joins as a member; omitted: refused. */
    organization: Type.Optional(Type.String({ minLength: 1, maxLength: 100 })),
  },
  strict,
);

export const ConsoleConfigSchema = Type.Object(
  {
    /** Whether anyone may sign up (their organization starts on the waitlist); false: operators create accounts. */
    sign_up: Type.Optional(Type.Boolean()),
    sso: Type.Optional(SsoConfigSchema),
    /** The only networks (addresses, CIDR ranges) the console's pages and API answer; omitted: anywhere. */
    networks: Type.Optional(Type.Array(Type.String())),
  },
  strict,
);

export const LedgerConfigSchema = Type.Object(
  {
    /** Days a ledger row (the request log) is kept after its request ended; omitted = kept for good. */
    retention_days: Type.Optional(Type.Integer({ minimum: 1, maximum: 36500 })),
  },
  strict,
);

export const ConfigFileSchema = Type.Object(
  {
    models: Type.Optional(Type.Array(ModelConfigSchema)),
    plans: Type.Optional(Type.Array(PlanConfigSchema)),
    safety: Type.Optional(SafetyConfigSchema),
    console: Type.Optional(ConsoleConfigSchema),
    ledger: Type.Optional(LedgerConfigSchema),
  },
  strict,
);

export type ConfigFile = Static<typeof ConfigFileSchema>;
/** A model as the file writes it. */
export type ModelConfigFile = Static<typeof ModelConfigSchema>;
/** `[console.sso]` as the file writes it. */
export type SsoConfigFile = Static<typeof SsoConfigSchema>;

/** A model with every default filled in. */
export interface ModelConfig {
  id: string;
  /**
   * Set for a prefix model (an id ending in `/*`, such as `openrouter/*`): the id without its `*`. It takes every
   * name that begins with it and has more after it, and sends the rest upstream as the model's name.
   */
  prefix: string | undefined;
  /** Other names that reach this model; answers carry the name the caller used. */
  aliases: string[];
  /** Model ids tried in order when this model cannot take a request now (see ChatService's fallBack). */
  fallbacks: string[];
  /** Model ids, each with a larger context window, tried in order for a request too long for this one. */
  contextFallbacks: string[];
  backend: "openai" | "demo";
  /** Empty for the demo backend. */
  baseUrls: string[];
  upstreamModel: string;
  apiKeyEnv: string | undefined;
  /** A file holding the key, read at start, at every reload and when it changes (see src/config/secrets.ts). */
  apiKeyFile: string | undefined;
  /** Undefined: the key goes as `Authorization: Bearer`. Lower case. */
  apiKeyHeader: string | undefined;
  /** Sent with every upstream call; names in lower case. */
  headers: Record<string, string>;
  ownedBy: string;
  contextWindow: number;
  maxOutputTokens: number;
  /** What each token counts against the token quotas: a multiple of 0.001 above 0, at most 1000 (see quotaTokens). */
  quotaWeight: number;
  /** Undefined: the output limit goes upstream under the name the caller used. */
  maxTokensField: "max_tokens" | "max_completion_tokens" | undefined;
  enabled: boolean;
  timeoutMs: number;
  streamDelayMs: number;
  /** Undefined: unlimited. */
  maxConcurrency: number | undefined;
  queueSize: number;
  queueTimeoutMs: number;
  firstByteTimeoutMs: number | undefined;
  idleTimeoutMs: number | undefined;
  breakerFailures: number;
  breakerCooldownMs: number;
  /** How often a server out for failures in a row is asked whether it answers again; 0: never (see Endpoint). */
  healthCheckMs: number;
  /** A path from each server's root that the health check asks for; undefined: `GET …/models` under base_url. */
  healthCheckPath: string | undefined;
  /** 0: no server is taken out for its failure rate. */
  breakerFailureRate: number;
  breakerWindow: number;
  routing: "least_busy" | "affinity";
  affinitySlack: number;
}

export interface PlanConfig {
  id: string;
  /** Model ids, or "*" for all. */
  models: string[];
  /** Undefined: unlimited. */
  tokensPer5h?: number;
  tokensPerMonth?: number;
  maxConcurrency?: number;
  /** Requests started a minute (see src/modules/admission/request-rate.ts). */
  requestsPerMinute?: number;
  /** Slots in a row an organization of this plan gets in its turn in a model's queue (1 unless set). */
  queueWeight?: number;
}

export interface SafetyRuleConfig {
  id: string;
  name: string;
  patterns: RegExp[];
  categories: string[];
  appliesTo: { input: boolean; output: boolean };
}

export interface SafetyConfig {
  enabled: boolean;
  timeoutMs: number;
  moderation: { url: string; model: string | undefined; apiKeyEnv: string | undefined; apiKeyFile: string | undefined; moderateOutput: boolean } | undefined;
  rules: SafetyRuleConfig[];
}

export interface ConsoleConfig {
  signUp: boolean;
  /** Undefined: passwords (and console tokens) only. */
  sso: SsoConfig | undefined;
  /** The only networks the console answers; undefined: anywhere. */
  networks: string[] | undefined;
}

export interface SsoConfig {
  issuer: string;
  clientId: string;
  /** Where the client secret is read from, at each sign-in. */
  clientSecret: SecretSource;
  redirectUrl: string;
  /** Lower case; empty: any domain. */
  allowedDomains: string[];
  label: string;
  /** false: passwords neither sign in nor sign up. */
  passwords: boolean;
  /** The organization a verified email without an account joins, by name; undefined: such emails are refused. */
  organization: string | undefined;
}

export interface LedgerConfig {
  /** Undefined: rows are kept for good. */
  retentionDays: number | undefined;
}

export interface Config {
  models: ModelConfig[];
  plans: PlanConfig[];
  safety: SafetyConfig;
  console: ConsoleConfig;
  ledger: LedgerConfig;
}
