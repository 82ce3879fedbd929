import type { LogLevel } from "../modules/observability/logger";
import { tracingSettings, type TracingSettings } from "../tracing/settings";
import { ConfigError } from "./load";
import { parseOrigins } from "../http/cors";
import { checkNetworks, NetworkListError } from "../modules/keys/networks";
import { variable, wholeNumber, yesOrNo, type Environment } from "./variables";

export interface ServeSettings {
  hostname: string;
  port: number;
  /** How long requests in flight may finish after SIGTERM or SIGINT. */
  drainMs: number;
  logLevel: LogLevel;
  /** Unset: /metrics is open. */
  metricsToken: string | undefined;
  /** From the OTEL_* variables; unset: no spans are recorded. */
  tracing: TracingSettings | undefined;
  /** How often the upstream key files are looked at for a rotated key; 0: only at reloads. */
  keyFileCheckMs: number;
  /** The proxies whose `X-Forwarded-For` names a caller's address (addresses and CIDR ranges); none unless set. */
  trustedProxies: string[] | undefined;
  /** The web pages' origins that may call the API (`*`: any); none unless set. */
  corsOrigins: { any: boolean; origins: string[] } | undefined;
  /** Every request's log line names its caller's address (about 1 µs a request); otherwise only bound keys' do. */
  logClientAddresses: boolean;
}

const logLevels: readonly LogLevel[] = ["debug", "info", "warn", "error", "silent"];
/** A drain longer than an hour outlives any process manager's stop timeout; a typo is likelier. */
const maxDrainMs = 3_600_000;

/**
 * What `sluice serve` reads from its environment, checked before anything is opened: a mistyped value stops the
 * start with the variable named (exit 1) rather than a runtime's stack trace, or a setting silently replaced by its
 * default (an unknown log level, a drain of NaN milliseconds).
 */
export function serveSettings(environment: Environment = process.env): ServeSettings {
  const written = variable(environment, "SLUICE_LOG_LEVEL") ?? "info";
  const logLevel = written.toLowerCase();
  if (!logLevels.includes(logLevel as LogLevel)) {
    throw new ConfigError(`SLUICE_LOG_LEVEL must be one of ${logLevels.join(", ")}, got "${written}"`);
  }
  return {
    hostname: variable(environment, "SLUICE_HOST") ?? "127.0.0.1",
    port: wholeNumber(environment, "SLUICE_PORT", 8080, { max: 65_535, what: "a port number" }),
    drainMs: wholeNumber(environment, "SLUICE_DRAIN_MS", 30_000, { max: maxDrainMs, what: "a whole number of milliseconds" }),
    logLevel: logLevel as LogLevel,
    metricsToken: environment.SLUICE_METRICS_TOKEN || undefined,
    tracing: tracingSettings(environment),
    keyFileCheckMs: wholeNumber(environment, "SLUICE_KEY_FILE_CHECK_MS", 5000, { max: 3_600_000, what: "a whole number of milliseconds" }),
    trustedProxies: trustedProxies(environment),
    corsOrigins: corsOrigins(environment),
    logClientAddresses: yesOrNo(environment, "SLUICE_LOG_CLIENT_IP", false),
  };
}

/** SLUICE_CORS_ORIGINS: `*`, or origins separated by commas. */
function corsOrigins(environment: Environment): { any: boolean; origins: string[] } | undefined {
  const written = variable(environment, "SLUICE_CORS_ORIGINS");
  if (written === undefined) return undefined;
  const parsed = parseOrigins(written);
  if ("wrong" in parsed) {
    throw new ConfigError(
      `SLUICE_CORS_ORIGINS must be * alone, or origins such as https://app.example.com separated by commas (no path, no trailing slash); got "${parsed.wrong}"`,
    );
  }
  return parsed;
}

/** SLUICE_TRUSTED_PROXIES: addresses and CIDR ranges, separated by commas. */
function trustedProxies(environment: Environment): string[] | undefined {
  const written = variable(environment, "SLUICE_TRUSTED_PROXIES");
  if (written === undefined) return undefined;
  try {
    return checkNetworks(written.split(",")) ?? undefined;
  } catch (error) {
    if (error instanceof NetworkListError) throw new ConfigError(`SLUICE_TRUSTED_PROXIES: ${error.message}`);
    throw error;
  }
}
