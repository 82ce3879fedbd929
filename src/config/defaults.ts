import type { ConfigFile } from "./schema";

/** What applies when no config file exists: the built-in demo model and a default plan that includes it. */
export const defaultConfigFile: ConfigFile = {
  models: [
    {
      id: "sluice-demo",
      backend: "demo",
      owned_by: "sluice",
      context_window: 32768,
      max_output_tokens: 8192,
    },
  ],
  plans: [{ id: "default", models: ["*"] }],
};

export const modelDefaults = {
  contextWindow: 32768,
  maxOutputTokens: 16384,
  quotaWeight: 1,
  timeoutMs: 600_000,
  streamDelayMs: 15,
  queueSize: 100,
  queueTimeoutMs: 30_000,
  breakerFailures: 5,
  breakerCooldownMs: 30_000,
  healthCheckMs: 5_000,
  breakerFailureRate: 0.5,
  breakerWindow: 20,
  routing: "least_busy",
  affinitySlack: 4,
} as const;
