// A stand-in OpenTelemetry collector for the tracing tests: it takes OTLP/HTTP JSON posts on /v1/traces, as a real
// collector's OTLP receiver does, and keeps every span with its resource. `delayMs` makes it slow, `status` makes it
// refuse.
import type { AttributeValue } from "../../src/tracing/span";

interface OtlpAttribute {
  key: string;
  value: { stringValue?: string; intValue?: string; doubleValue?: number; boolValue?: boolean };
}

/** A span as the collector received it, its attributes read back into plain values. */
export interface ReceivedSpan {
  traceId: string;
  spanId: string;
  parentSpanId?: string;
  traceState?: string;
  name: string;
  kind: number;
  startTimeUnixNano: string;
  endTimeUnixNano: string;
  attributes: Record<string, AttributeValue>;
  events: { name: string; timeUnixNano: string }[];
  status: { code: number; message?: string };
  resource: Record<string, AttributeValue>;
}

export interface FakeCollector {
  url: string;
  spans: ReceivedSpan[];
  /** Posts received, with their headers. */
  posts: { headers: Record<string, string>; spans: number }[];
  delayMs: number;
  status: number;
  /** Posts answered with `status` other than 200. */
  refused: number;
  stop(): Promise<void>;
}

function plain(attributes: OtlpAttribute[] | undefined): Record<string, AttributeValue> {
  const values: Record<string, AttributeValue> = {};
  for (const { key, value } of attributes ?? []) {
    if (value.stringValue !== undefined) values[key] = value.stringValue;
    else if (value.intValue !== undefined) values[key] = Number(value.intValue);
    else if (value.doubleValue !== undefined) values[key] = value.doubleValue;
    else if (value.boolValue !== undefined) values[key] = value.boolValue;
  }
  return values;
}

export function startFakeCollector(): FakeCollector {
  const collector: FakeCollector = {
    url: "",
    spans: [],
    posts: [],
    delayMs: 0,
    status: 200,
    refused: 0,
    stop: async () => {
      await server.stop(true);
    },
  };
  const server = Bun.serve({
    port: 0,
    hostname: "127.0.0.1",
    async fetch(request) {
      if (request.method !== "POST" || new URL(request.url).pathname !== "/v1/traces") return new Response("not found", { status: 404 });
      const body = (await request.json()) as {
        resourceSpans: {
          resource: { attributes: OtlpAttribute[] };
          scopeSpans: { spans: (Omit<ReceivedSpan, "attributes" | "resource"> & { attributes: OtlpAttribute[] })[] }[];
        }[];
      };
      if (collector.delayMs > 0) await Bun.sleep(collector.delayMs);
      if (collector.status !== 200) {
        collector.refused++;
        return new Response("refused", { status: collector.status });
      }
      let count = 0;
      for (const resourceSpans of body.resourceSpans) {
        const resource = plain(resourceSpans.resource.attributes);
        for (const scope of resourceSpans.scopeSpans) {
          for (const span of scope.spans) {
            collector.spans.push({ ...span, attributes: plain(span.attributes), resource });
            count++;
          }
        }
      }
      collector.posts.push({ headers: request.headers.toJSON(), spans: count });
      return Response.json({ partialSuccess: {} });
    },
  });
  collector.url = `http://127.0.0.1:${server.port}/v1/traces`;
  return collector;
}
