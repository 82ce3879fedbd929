// Tracing is set up as every OpenTelemetry SDK is, from the standard OTEL_* variables
// (https://opentelemetry.io/docs/specs/otel/configuration/sdk-environment-variables/), so an operator's existing
// collector settings apply unchanged. Two differences, both written in the README: nothing is exported until an
// endpoint is named (an SDK would post to localhost:4318), and the protocol is OTLP over HTTP with JSON bodies, which
// every collector's OTLP HTTP receiver takes beside protobuf.

import { ConfigError } from "../config/load";
import { type Environment, firstOf, variable, wholeNumber } from "../config/variables";

export type SamplerName = "always_on" | "always_off" | "traceidratio" | "parentbased_always_on" | "parentbased_always_off" | "parentbased_traceidratio";

export interface TracingSettings {
  /** Where spans are posted: the full URL of the collector's traces route. */
  endpoint: string;
  /** Sent with every export (a vendor's API key, say). */
  headers: Record<string, string>;
  timeoutMs: number;
  /** The resource's attributes, `service.name` among them. */
  resource: Record<string, string>;
  sampler: SamplerName;
  /** For the ratio samplers: the share of traces recorded, 0 to 1. */
  ratio: number;
  /** How long a span may wait before its batch is sent. */
  scheduleDelayMs: number;
  /** Spans held at most; more are dropped (and counted) until an export makes room. */
  maxQueueSize: number;
  maxExportBatchSize: number;
}

const samplers: readonly SamplerName[] = [
  "always_on",
  "always_off",
  "traceidratio",
  "parentbased_always_on",
  "parentbased_always_off",
  "parentbased_traceidratio",
];

/** `key1=value1,key2=value2`, values percent-encoded, as the specification writes headers and resource attributes. */
function pairs(name: string, value: string): Record<string, string> {
  const result: Record<string, string> = {};
  for (const member of value.split(",")) {
    if (member.trim() === "") continue;
    const equals = member.indexOf("=");
    const key = equals > 0 ? member.slice(0, equals).trim() : "";
    if (key === "") throw new ConfigError(`${name} must be a list of key=value pairs separated by commas, got "${member.trim()}"`);
    try {
      result[key] = decodeURIComponent(member.slice(equals + 1).trim());
    } catch {
      throw new ConfigError(`${name} has a value that is not valid percent-encoding: "${key}"`);
    }
  }
  return result;
}

function httpUrl(name: string, value: string): URL {
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    throw new ConfigError(`${name} must be an http:// or https:// URL, got "${value}"`);
  }
  if (url.protocol !== "http:" && url.protocol !== "https:") throw new ConfigError(`${name} must be an http:// or https:// URL, got "${value}"`);
  return url;
}

/** The traces route under a base endpoint, as the specification builds it: `/v1/traces` after the base's path. */
function tracesUrlOf(base: URL): string {
  const url = new URL(base);
  url.pathname = `${url.pathname.replace(/\/$/, "")}/v1/traces`;
  return url.toString();
}

/**
 * The tracing settings of the environment; undefined when no OTLP endpoint is named, tracing is turned off
 * (`OTEL_SDK_DISABLED=true`, `OTEL_TRACES_EXPORTER=none`) or the sampler is `always_off`. A value that is not valid
 * stops the start with the variable named.
 */
export function tracingSettings(environment: Environment = process.env): TracingSettings | undefined {
  if (variable(environment, "OTEL_SDK_DISABLED")?.toLowerCase() === "true") return undefined;
  const exporter = variable(environment, "OTEL_TRACES_EXPORTER")?.toLowerCase();
  if (exporter === "none") return undefined;
  if (exporter !== undefined && exporter !== "otlp") {
    throw new ConfigError(`OTEL_TRACES_EXPORTER must be otlp or none (Sluice exports traces over OTLP only), got "${exporter}"`);
  }
  const specific = variable(environment, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT");
  const general = variable(environment, "OTEL_EXPORTER_OTLP_ENDPOINT");
  if (specific === undefined && general === undefined) return undefined;
  const endpoint =
    specific !== undefined
      ? httpUrl("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", specific).toString()
      : tracesUrlOf(httpUrl("OTEL_EXPORTER_OTLP_ENDPOINT", general as string));
  const protocol = firstOf(environment, "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL");
  if (protocol && protocol[1] !== "http/json") {
    throw new ConfigError(
      `${protocol[0]} must be http/json, got "${protocol[1]}": Sluice exports traces as OTLP over HTTP with JSON bodies, which a collector's OTLP HTTP receiver (port 4318) takes`,
    );
  }
  const samplerWritten = variable(environment, "OTEL_TRACES_SAMPLER")?.toLowerCase() ?? "parentbased_always_on";
  if (!samplers.includes(samplerWritten as SamplerName)) {
    throw new ConfigError(`OTEL_TRACES_SAMPLER must be one of ${samplers.join(", ")}, got "${samplerWritten}"`);
  }
  const sampler = samplerWritten as SamplerName;
  if (sampler === "always_off") return undefined;
  const ratioWritten = variable(environment, "OTEL_TRACES_SAMPLER_ARG");
  const ratio = ratioWritten === undefined || !sampler.endsWith("traceidratio") ? 1 : Number(ratioWritten);
  if (!(ratio >= 0 && ratio <= 1)) throw new ConfigError(`OTEL_TRACES_SAMPLER_ARG must be a number from 0 to 1, got "${ratioWritten}"`);
  const headers = {
    ...pairs("OTEL_EXPORTER_OTLP_HEADERS", variable(environment, "OTEL_EXPORTER_OTLP_HEADERS") ?? ""),
    ...pairs("OTEL_EXPORTER_OTLP_TRACES_HEADERS", variable(environment, "OTEL_EXPORTER_OTLP_TRACES_HEADERS") ?? ""),
  };
  const resource = pairs("OTEL_RESOURCE_ATTRIBUTES", variable(environment, "OTEL_RESOURCE_ATTRIBUTES") ?? "");
  resource["service.name"] = variable(environment, "OTEL_SERVICE_NAME") ?? resource["service.name"] ?? "sluice";
  const maxQueueSize = wholeNumber(environment, "OTEL_BSP_MAX_QUEUE_SIZE", 2048, { min: 1, max: 1_000_000 });
  const maxExportBatchSize = wholeNumber(environment, "OTEL_BSP_MAX_EXPORT_BATCH_SIZE", 512, { min: 1, max: 1_000_000 });
  if (maxExportBatchSize > maxQueueSize) {
    throw new ConfigError(`OTEL_BSP_MAX_EXPORT_BATCH_SIZE (${maxExportBatchSize}) must not exceed OTEL_BSP_MAX_QUEUE_SIZE (${maxQueueSize})`);
  }
  return {
    endpoint,
    headers,
    timeoutMs: wholeNumber(environment, ["OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "OTEL_EXPORTER_OTLP_TIMEOUT"], 10_000, { min: 1, max: 600_000 }),
    resource,
    sampler,
    ratio,
    scheduleDelayMs: wholeNumber(environment, "OTEL_BSP_SCHEDULE_DELAY", 5000, { min: 1, max: 3_600_000 }),
    maxQueueSize,
    maxExportBatchSize,
  };
}

/** The endpoint as the start-up line shows it: without credentials or query. */
export function shownEndpoint(settings: TracingSettings): string {
  const url = new URL(settings.endpoint);
  return `${url.protocol}//${url.host}${url.pathname}`;
}
