// Upstream time limits for every request in flight, kept by one coarse timer instead of a setTimeout per request
// (with thousands of streams in flight, per-request timers and their clean-up show up in profiles).

/** The abort reason of a request whose upstream call ran past its model's `timeout_ms`. */
export class DeadlineExceeded extends Error {
  override name = "DeadlineExceeded";
}

const tickMs = 25;
const deadlines = new Map<AbortController, { at: number; timeoutMs: number }>();
let timer: Timer | undefined;

function tick(): void {
  const now = performance.now();
  for (const [controller, deadline] of deadlines) {
    if (deadline.at > now) continue;
    deadlines.delete(controller);
    controller.abort(new DeadlineExceeded(`no complete answer within ${deadline.timeoutMs} ms`));
  }
  if (deadlines.size === 0 && timer) {
    clearInterval(timer);
    timer = undefined;
  }
}

/** Aborts the controller with DeadlineExceeded once `timeoutMs` have passed (to within 25 ms); returns the cancel. */
export function abortAfter(controller: AbortController, timeoutMs: number): () => void {
  deadlines.set(controller, { at: performance.now() + timeoutMs, timeoutMs });
  if (!timer) {
    timer = setInterval(tick, tickMs);
    timer.unref();
  }
  return () => {
    deadlines.delete(controller);
  };
}
