// Upstream time limits for every request in flight, kept by one coarse timer instead of a setTimeout per request
// (with thousands of streams in flight, per-request timers and their clean-up show up in profiles).

/** The abort reason of a request whose upstream call ran past its model's `timeout_ms`. */
export class DeadlineExceeded extends Error {
  override name = "DeadlineExceeded";
}

const tickMs = 25;
/**
 * Deadlines by time limit, each line in the order its deadlines fall: within one limit that is the order they were
 * set (the clock only moves forward), so a tick reads only the deadlines that are due and the first one that is not.
 * Reading every deadline on every tick cost 2,000 streams about 5 MB of garbage a second (an entry per deadline).
 */
const lines = new Map<number, Map<AbortController, number>>();
let timer: Timer | undefined;

function tick(): void {
  const now = performance.now();
  for (const [timeoutMs, line] of lines) {
    for (const [controller, at] of line) {
      if (at > now) break;
      line.delete(controller);
      controller.abort(new DeadlineExceeded(`no complete answer within ${timeoutMs} ms`));
    }
    if (line.size === 0) lines.delete(timeoutMs);
  }
  if (lines.size === 0 && timer) {
    clearInterval(timer);
    timer = undefined;
  }
}

function lineOf(timeoutMs: number): Map<AbortController, number> {
  let line = lines.get(timeoutMs);
  if (!line) {
    line = new Map();
    lines.set(timeoutMs, line);
  }
  return line;
}

/**
 * Aborts the controller with DeadlineExceeded once `timeoutMs` have passed (to within 25 ms), unless clearDeadline
 * is called first with the same time limit. Set again, a controller's deadline is replaced.
 */
export function setDeadline(controller: AbortController, timeoutMs: number): void {
  const line = lineOf(timeoutMs);
  // Set again, a controller goes to the end of its line, where its new deadline belongs.
  line.delete(controller);
  line.set(controller, performance.now() + timeoutMs);
  if (!timer) {
    timer = setInterval(tick, tickMs);
    timer.unref();
  }
}

/** Cancels a deadline set with setDeadline; nothing happens if it has fired or was never set. */
export function clearDeadline(controller: AbortController, timeoutMs: number): void {
  lines.get(timeoutMs)?.delete(controller);
}
