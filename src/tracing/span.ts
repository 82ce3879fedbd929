// One span as OTLP carries it (https://opentelemetry.io/docs/specs/otlp/#json-protobuf-encoding): ids in hex, times
// in nanoseconds since the epoch as decimal text (they pass 2^53), attributes as typed values.

export type AttributeValue = string | number | boolean;

/** OTLP's span kinds and status codes, as numbers. */
export const SpanKind = { server: 2, client: 3 } as const;
export const StatusCode = { unset: 0, error: 2 } as const;

export interface SpanEvent {
  name: string;
  /** performance.now() of when it happened. */
  at: number;
}

/** A finished span, ready to export. Times are performance.now() readings, turned into epoch time when encoded. */
export interface Span {
  traceId: string;
  spanId: string;
  parentSpanId: string | undefined;
  traceState: string | undefined;
  name: string;
  kind: number;
  startedAt: number;
  endedAt: number;
  attributes: Record<string, AttributeValue | undefined>;
  events: SpanEvent[];
  status: { code: number; message?: string };
}

// Ids are cut from a block of random bytes in hex, one `getRandomValues` and one hex conversion a 256 span ids: a call
// of each per id cost 180-230 ns an id against 45-70 (a scratch benchmark, bench/HISTORY.md, fifty-fifth session).
const blockBytes = 2048;
let randomHex = "";
let randomAt = 0;

/** `bytes` random bytes in hex, never all zeros (W3C Trace Context and OTLP treat zeros as no id). */
export function randomHexId(bytes: 8 | 16): string {
  for (;;) {
    const length = bytes * 2;
    if (randomAt + length > randomHex.length) {
      randomHex = Buffer.from(crypto.getRandomValues(new Uint8Array(blockBytes))).toString("hex");
      randomAt = 0;
    }
    const id = randomHex.slice(randomAt, randomAt + length);
    randomAt += length;
    if (!/^0+$/.test(id)) return id;
  }
}

const timeOrigin = performance.timeOrigin;

/**
 * A performance.now() reading as nanoseconds since the epoch, in decimal: microseconds since the epoch fit a double
 * exactly (about 2^50), so the nanoseconds are those and three zeros. Through a BigInt, a span's encoding cost a fifth
 * more.
 */
function epochNanos(at: number): string {
  return `${Math.round((timeOrigin + at) * 1000)}000`;
}

type OtlpValue = { stringValue: string } | { intValue: string } | { doubleValue: number } | { boolValue: boolean };

function otlpValue(value: AttributeValue): OtlpValue {
  if (typeof value === "string") return { stringValue: value };
  if (typeof value === "boolean") return { boolValue: value };
  return Number.isInteger(value) ? { intValue: String(value) } : { doubleValue: value };
}

/** Attributes in OTLP's list form; those left undefined are not sent. */
export function otlpAttributes(attributes: Record<string, AttributeValue | undefined>): { key: string; value: OtlpValue }[] {
  const list: { key: string; value: OtlpValue }[] = [];
  for (const key in attributes) {
    const value = attributes[key];
    if (value !== undefined) list.push({ key, value: otlpValue(value) });
  }
  return list;
}

/**
 * A span in OTLP's JSON encoding, as objects for one JSON.stringify of the batch: written as text instead, a span
 * cost more (2.1-2.6 µs against 1.5-1.6 in the same scratch benchmark).
 */
export function otlpSpan(span: Span): Record<string, unknown> {
  return {
    traceId: span.traceId,
    spanId: span.spanId,
    parentSpanId: span.parentSpanId,
    traceState: span.traceState,
    name: span.name,
    kind: span.kind,
    startTimeUnixNano: epochNanos(span.startedAt),
    endTimeUnixNano: epochNanos(span.endedAt),
    attributes: otlpAttributes(span.attributes),
    events: span.events.map((event) => ({ timeUnixNano: epochNanos(event.at), name: event.name })),
    status: span.status,
  };
}
