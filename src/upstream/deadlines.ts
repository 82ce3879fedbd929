// Upstream time limits for every request in flight, kept by one timer set for the earliest deadline instead of a
// setTimeout per request (with thousands of streams in flight, per-request timers and their clean-up show up in
// profiles) or an interval (which woke an idle event loop 40 times a second, about 60 µs a wake on this machine:
// bench/HISTORY.md, "The request log line's wake-ups").

/** The abort reason of a request whose upstream call ran past its model's `timeout_ms`. */
export class DeadlineExceeded extends Error {
  override name = "DeadlineExceeded";
}

/**
 * Deadlines by time limit, each line in the order its deadlines fall: within one limit that is the order they were
 * set (the clock only moves forward), so the timer reads only the deadlines that are due and the first one that is
 * not. Reading every deadline on every tick cost 2,000 streams about 5 MB of garbage a second (an entry per deadline).
 */
const lines = new Map<number, Map<AbortController, number>>();
let timer: Timer | undefined;
const longestDelayMs = 2 ** 31 - 1;
/** When the timer fires. A deadline set later than this needs no new timer: the timer, once fired, looks again. */
let timerAt = Number.POSITIVE_INFINITY;

function fire(): void {
  timer = undefined;
  timerAt = Number.POSITIVE_INFINITY;
  const now = performance.now();
  let next = Number.POSITIVE_INFINITY;
  for (const [timeoutMs, line] of lines) {
    for (const [controller, at] of line) {
      if (at > now) {
        next = Math.min(next, at);
        break;
      }
      line.delete(controller);
      controller.abort(new DeadlineExceeded(`no complete answer within ${timeoutMs} ms`));
    }
    if (line.size === 0) lines.delete(timeoutMs);
  }
  // An abort listener may have set a deadline (and the timer) meanwhile; the earlier of the two stays.
  if (next < timerAt) arm(next, now);
}

function arm(at: number, now: number): void {
  clearTimeout(timer);
  timerAt = at;
  // setTimeout counts whole milliseconds: rounded up, the timer never fires before the deadline it was set for. A
  // delay past setTimeout's 32-bit limit would fire at once: the timer fires at the limit and is set again.
  timer = setTimeout(fire, Math.min(longestDelayMs, Math.max(0, Math.ceil(at - now))));
  timer.unref();
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
 * Aborts the controller with DeadlineExceeded once `timeoutMs` have passed, unless clearDeadline is called first
 * with the same time limit. Set again, a controller's deadline is replaced.
 */
export function setDeadline(controller: AbortController, timeoutMs: number): void {
  const line = lineOf(timeoutMs);
  const now = performance.now();
  const at = now + timeoutMs;
  // Set again, a controller goes to the end of its line, where its new deadline belongs.
  line.delete(controller);
  line.set(controller, at);
  if (at < timerAt) arm(at, now);
}

/**
 * Cancels a deadline set with setDeadline; nothing happens if it has fired or was never set. The timer stays: when
 * it fires with nothing due, it is set for the earliest deadline left, if any.
 */
export function clearDeadline(controller: AbortController, timeoutMs: number): void {
  lines.get(timeoutMs)?.delete(controller);
}
