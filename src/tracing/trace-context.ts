// W3C Trace Context (https://www.w3.org/TR/trace-context/): a caller's `traceparent` and `tracestate`, and what each
// request does with them. Without a trace of Sluice's own (tracing off, or the sampler left it out), the caller's
// context goes to the model server unchanged, as a proxy without tracing passes it, so that its spans (vLLM's with
// --otlp-traces-endpoint, a hosted API's) join the caller's trace; with one, see request-trace.ts.

import type { RequestRecord } from "../modules/observability/request-record";
import type { BackendRequest } from "../upstream/types";

/** A caller's valid trace context. */
export interface CallerContext {
  traceparent: string;
  traceId: string;
  spanId: string;
  /** The caller's sampled flag: it records this trace. */
  sampled: boolean;
  /** Vendors' entries; only kept with a valid traceparent, as the specification says. */
  tracestate: string | undefined;
}

/** A request's trace, as the upstream call, the log line and the end of the request use it. */
export interface TraceContext {
  /** The trace's id, for the log line. */
  readonly traceId: string;
  /** The trace headers of one upstream call about to be sent to `url` as `sendId`; a recorded trace opens its span. */
  callHeaders(request: BackendRequest, url: string, sendId: string): Record<string, string>;
  /** Whether the calls' statuses and endings are wanted (a recorded trace). */
  readonly recording: boolean;
  /** The call under way answered with this HTTP status. */
  callAnswered(status: number): void;
  /** The call under way ended, with its failure when it failed. */
  callEnded(failure: unknown): void;
  /** The request ended, its record complete. */
  end(record: RequestRecord): void;
}

// Version 00's layout; a later version may add fields after a dash, which the specification says to keep.
const traceparentPattern = /^[0-9a-f]{2}-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-[^\s]*)?$/;
const allZeroTrace = "00000000000000000000000000000000";
const allZeroSpan = "0000000000000000";
/** At most 32 list members of at most 256 characters each, as the specification bounds it. */
const maxTracestateLength = 32 * 257;

/**
 * The trace context of a request's headers; undefined when it has no traceparent or an invalid one (version ff, a
 * trace or parent id of zeros, a wrong layout), which the specification says to ignore rather than refuse.
 */
export function callerContextOf(headers: Headers): CallerContext | undefined {
  const traceparent = headers.get("traceparent");
  if (traceparent === null) return undefined;
  const match = traceparentPattern.exec(traceparent);
  if (!match || traceparent.startsWith("ff") || match[1] === allZeroTrace || match[2] === allZeroSpan) return undefined;
  const tracestate = headers.get("tracestate");
  return {
    traceparent,
    traceId: match[1] as string,
    spanId: match[2] as string,
    sampled: (Number.parseInt(match[3] as string, 16) & 1) === 1,
    tracestate: tracestate !== null && tracestate.length <= maxTracestateLength ? tracestate : undefined,
  };
}

/** The caller's context passed on unchanged: nothing recorded here. */
export class PassedContext implements TraceContext {
  readonly traceId: string;
  readonly recording = false;
  private readonly headers: Record<string, string>;

  constructor(caller: CallerContext) {
    this.traceId = caller.traceId;
    this.headers = caller.tracestate === undefined ? { traceparent: caller.traceparent } : { traceparent: caller.traceparent, tracestate: caller.tracestate };
  }

  callHeaders(): Record<string, string> {
    return this.headers;
  }

  callAnswered(): void {}
  callEnded(): void {}
  end(): void {}
}
