import { describe, expect, test } from "bun:test";
import { serveSettings } from "../../src/config/environment";
import { ConfigError } from "../../src/config/load";
import { shownEndpoint, tracingSettings } from "../../src/tracing/settings";

describe("tracing settings, from OpenTelemetry's variables", () => {
  test("nothing is exported until an endpoint is named, or when tracing is turned off", () => {
    expect(tracingSettings({})).toBeUndefined();
    expect(tracingSettings({ OTEL_SERVICE_NAME: "gateway", OTEL_TRACES_SAMPLER: "always_on" })).toBeUndefined();
    const endpoint = { OTEL_EXPORTER_OTLP_ENDPOINT: "http://collector:4318" };
    expect(tracingSettings({ ...endpoint, OTEL_SDK_DISABLED: "true" })).toBeUndefined();
    expect(tracingSettings({ ...endpoint, OTEL_TRACES_EXPORTER: "none" })).toBeUndefined();
    expect(tracingSettings({ ...endpoint, OTEL_TRACES_SAMPLER: "always_off" })).toBeUndefined();
  });

  test("the specification's defaults, and /v1/traces after a base endpoint's path", () => {
    expect(tracingSettings({ OTEL_EXPORTER_OTLP_ENDPOINT: "http://collector:4318" })).toEqual({
      endpoint: "http://collector:4318/v1/traces",
      headers: {},
      timeoutMs: 10_000,
      resource: { "service.name": "sluice" },
      sampler: "parentbased_always_on",
      ratio: 1,
      scheduleDelayMs: 5000,
      maxQueueSize: 2048,
      maxExportBatchSize: 512,
    });
    expect(tracingSettings({ OTEL_EXPORTER_OTLP_ENDPOINT: "https://otel.example.com/tenant/" })?.endpoint).toBe("https://otel.example.com/tenant/v1/traces");
    // The traces endpoint is used as it is written, and wins over the base.
    expect(tracingSettings({ OTEL_EXPORTER_OTLP_ENDPOINT: "http://a:4318", OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: "http://b:4318/custom/path" })?.endpoint).toBe(
      "http://b:4318/custom/path",
    );
  });

  test("headers, resource attributes, sampler, timeouts and the batch's bounds as operators write them", () => {
    const settings = tracingSettings({
      OTEL_EXPORTER_OTLP_ENDPOINT: "http://user:secret@collector:4318?x=1",
      OTEL_EXPORTER_OTLP_HEADERS: "authorization=Basic%20abc, tenant = acme",
      OTEL_EXPORTER_OTLP_TRACES_HEADERS: "tenant=traces",
      OTEL_RESOURCE_ATTRIBUTES: "deployment.environment=prod,service.name=ignored",
      OTEL_SERVICE_NAME: "gateway-eu",
      OTEL_TRACES_SAMPLER: "ParentBased_TraceIdRatio",
      OTEL_TRACES_SAMPLER_ARG: "0.1",
      OTEL_EXPORTER_OTLP_TIMEOUT: "2000",
      OTEL_BSP_SCHEDULE_DELAY: "1000",
      OTEL_BSP_MAX_QUEUE_SIZE: "100",
      OTEL_BSP_MAX_EXPORT_BATCH_SIZE: "50",
      OTEL_EXPORTER_OTLP_PROTOCOL: "http/json",
    });
    expect(settings).toMatchObject({
      headers: { authorization: "Basic abc", tenant: "traces" },
      resource: { "deployment.environment": "prod", "service.name": "gateway-eu" },
      sampler: "parentbased_traceidratio",
      ratio: 0.1,
      timeoutMs: 2000,
      scheduleDelayMs: 1000,
      maxQueueSize: 100,
      maxExportBatchSize: 50,
    });
    // The start-up line names the collector without its credentials or query.
    expect(shownEndpoint(settings as NonNullable<typeof settings>)).toBe("http://collector:4318/v1/traces");
    // A ratio only means something to the ratio samplers.
    expect(tracingSettings({ OTEL_EXPORTER_OTLP_ENDPOINT: "http://c:4318", OTEL_TRACES_SAMPLER_ARG: "7" })?.ratio).toBe(1);
  });

  test("a value that is not valid stops the start, naming the variable", () => {
    const endpoint = { OTEL_EXPORTER_OTLP_ENDPOINT: "http://collector:4318" };
    const cases: [Record<string, string>, string][] = [
      [{ OTEL_EXPORTER_OTLP_ENDPOINT: "collector:4318" }, "OTEL_EXPORTER_OTLP_ENDPOINT must be an http:// or https:// URL"],
      [{ OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: "grpc://collector:4317" }, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT must be an http:// or https:// URL"],
      [{ ...endpoint, OTEL_EXPORTER_OTLP_PROTOCOL: "grpc" }, "OTEL_EXPORTER_OTLP_PROTOCOL must be http/json"],
      [{ ...endpoint, OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: "http/protobuf" }, "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL must be http/json"],
      [{ ...endpoint, OTEL_TRACES_EXPORTER: "jaeger" }, "OTEL_TRACES_EXPORTER must be otlp or none"],
      [{ ...endpoint, OTEL_TRACES_SAMPLER: "sometimes" }, "OTEL_TRACES_SAMPLER must be one of"],
      [{ ...endpoint, OTEL_TRACES_SAMPLER: "traceidratio", OTEL_TRACES_SAMPLER_ARG: "1.5" }, "OTEL_TRACES_SAMPLER_ARG must be a number from 0 to 1"],
      [{ ...endpoint, OTEL_TRACES_SAMPLER: "traceidratio", OTEL_TRACES_SAMPLER_ARG: "half" }, "OTEL_TRACES_SAMPLER_ARG must be a number from 0 to 1"],
      [{ ...endpoint, OTEL_EXPORTER_OTLP_HEADERS: "just-a-token" }, "OTEL_EXPORTER_OTLP_HEADERS must be a list of key=value pairs"],
      [{ ...endpoint, OTEL_EXPORTER_OTLP_HEADERS: "a=%E0%A4%A" }, "OTEL_EXPORTER_OTLP_HEADERS has a value that is not valid percent-encoding"],
      [{ ...endpoint, OTEL_EXPORTER_OTLP_TIMEOUT: "0" }, "OTEL_EXPORTER_OTLP_TIMEOUT must be a whole number from 1"],
      [{ ...endpoint, OTEL_BSP_MAX_QUEUE_SIZE: "-1" }, "OTEL_BSP_MAX_QUEUE_SIZE must be a whole number"],
      [{ ...endpoint, OTEL_BSP_MAX_QUEUE_SIZE: "10", OTEL_BSP_MAX_EXPORT_BATCH_SIZE: "20" }, "must not exceed OTEL_BSP_MAX_QUEUE_SIZE"],
    ];
    for (const [variables, message] of cases) {
      expect(() => tracingSettings(variables)).toThrow(ConfigError);
      expect(() => tracingSettings(variables)).toThrow(message);
    }
    // `sluice serve` reads them with the rest of its environment, before it opens anything.
    expect(() => serveSettings({ ...endpoint, OTEL_EXPORTER_OTLP_PROTOCOL: "grpc" })).toThrow("OTEL_EXPORTER_OTLP_PROTOCOL must be http/json");
    expect(serveSettings(endpoint).tracing?.endpoint).toBe("http://collector:4318/v1/traces");
  });
});
