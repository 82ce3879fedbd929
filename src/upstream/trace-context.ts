// W3C Trace Context (https://www.w3.org/TR/trace-context/): a caller's `traceparent` and `tracestate`, passed on to
// the model server so that its spans (vLLM's with --otlp-traces-endpoint, a hosted API's) join the caller's trace.
// Sluice makes no span of its own: it passes the context on unchanged, as a proxy without tracing does, and names the
// trace in its log line.

/** A caller's trace context, as it came. */
export interface TraceContext {
  traceparent: string;
  /** Vendors' entries; only passed on with a valid traceparent, as the specification says. */
  tracestate: string | undefined;
}

// Version 00's layout; a later version may add fields after a dash, which the specification says to keep.
const traceparentPattern = /^[0-9a-f]{2}-([0-9a-f]{32})-[0-9a-f]{16}-[0-9a-f]{2}(-[^\s]*)?$/;
const allZeroTrace = "00000000000000000000000000000000";
/** At most 32 list members of at most 256 characters each, as the specification bounds it. */
const maxTracestateLength = 32 * 257;

/**
 * The trace context of a request's headers; undefined when it has no traceparent or an invalid one (version ff, a
 * trace id of zeros, a wrong layout), which the specification says to ignore rather than refuse.
 */
export function traceContextOf(headers: Headers): TraceContext | undefined {
  const traceparent = headers.get("traceparent");
  if (traceparent === null) return undefined;
  const match = traceparentPattern.exec(traceparent);
  if (!match || traceparent.startsWith("ff") || match[1] === allZeroTrace) return undefined;
  const tracestate = headers.get("tracestate");
  return {
    traceparent,
    tracestate: tracestate !== null && tracestate.length <= maxTracestateLength ? tracestate : undefined,
  };
}

/** The trace id of a valid traceparent (its second field), for the log line. */
export function traceIdOf(context: TraceContext): string {
  return context.traceparent.slice(3, 35);
}
