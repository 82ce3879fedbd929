import { describe, expect, test } from "bun:test";
import { clearDeadline, DeadlineExceeded, setDeadline } from "../../src/upstream/deadlines";

/** Sets a deadline and returns its cancel. */
function abortAfter(controller: AbortController, timeoutMs: number): () => void {
  setDeadline(controller, timeoutMs);
  return () => clearDeadline(controller, timeoutMs);
}

function reasonOf(controller: AbortController): unknown {
  return controller.signal.aborted ? controller.signal.reason : undefined;
}

describe("setDeadline and clearDeadline", () => {
  test("deadlines of several time limits each fire once due, with DeadlineExceeded; cancelled ones never", async () => {
    const limits = [40, 120, 40, 80, 120, 40];
    const controllers = limits.map(() => new AbortController());
    const cancels = controllers.map((controller, index) => abortAfter(controller, limits[index] as number));
    const setAt = performance.now();
    (cancels[2] as () => void)();
    (cancels[4] as () => void)();
    // Before the first deadline is due.
    await Bun.sleep(30);
    // None is due yet (all six, when this test wakes on time; a loaded machine may wake it late, and then only those
    // still not due are held to it).
    const elapsed = performance.now() - setAt;
    const firedEarly = limits.filter((limit, index) => limit > elapsed && (controllers[index] as AbortController).signal.aborted);
    expect(firedEarly).toEqual([]);
    await Bun.sleep(300);
    expect(controllers.map((controller) => controller.signal.aborted)).toEqual([true, true, false, true, false, true]);
    expect(reasonOf(controllers[1] as AbortController)).toBeInstanceOf(DeadlineExceeded);
    expect(String((reasonOf(controllers[3] as AbortController) as Error).message)).toContain("80 ms");
  });

  test("a deadline set again for the same controller replaces the first: it fires at the new time, not the old", async () => {
    const controller = new AbortController();
    const other = new AbortController();
    abortAfter(controller, 200);
    abortAfter(other, 200);
    await Bun.sleep(120);
    // Armed again (as an idle limit is on every read): due at 320 ms now, after `other` in the same line.
    const rearmedAt = performance.now();
    abortAfter(controller, 200);
    await Bun.sleep(140);
    expect(other.signal.aborted).toBe(true);
    // Not due before 200 ms after it was armed again (a late wake-up of this test may pass that; then it is not asked).
    if (performance.now() - rearmedAt < 200) expect(controller.signal.aborted).toBe(false);
    await Bun.sleep(200);
    expect(controller.signal.aborted).toBe(true);
  });

  test("two thousand deadlines of one limit: the half that is not cancelled fires, and only that half", async () => {
    const controllers = Array.from({ length: 2000 }, () => new AbortController());
    const cancels = controllers.map((controller) => abortAfter(controller, 50));
    for (let index = 0; index < cancels.length; index += 2) (cancels[index] as () => void)();
    await Bun.sleep(300);
    const aborted = controllers.map((controller) => controller.signal.aborted);
    expect(aborted.filter((value, index) => value === (index % 2 === 1)).length).toBe(2000);
  });

  test("a deadline whose abort listener cancels others in its line leaves those alone", async () => {
    const first = new AbortController();
    const second = new AbortController();
    const third = new AbortController();
    abortAfter(first, 40);
    const cancelSecond = abortAfter(second, 40);
    abortAfter(third, 40);
    first.signal.addEventListener("abort", cancelSecond);
    await Bun.sleep(300);
    expect([first.signal.aborted, second.signal.aborted, third.signal.aborted]).toEqual([true, false, true]);
  });

  test("clearing a deadline with another time limit than it was set with leaves it in place", async () => {
    const controller = new AbortController();
    setDeadline(controller, 40);
    clearDeadline(controller, 80);
    await Bun.sleep(200);
    expect(controller.signal.reason).toBeInstanceOf(DeadlineExceeded);
  });

  test("a shorter limit set after a longer one fires on its own time, not the longer one's", async () => {
    const long = new AbortController();
    const short = new AbortController();
    abortAfter(long, 5_000);
    abortAfter(short, 30);
    await Bun.sleep(400);
    expect([short.signal.aborted, long.signal.aborted]).toEqual([true, false]);
    clearDeadline(long, 5_000);
  });

  test("after every deadline is cleared, the next one set still fires; one past setTimeout's 32-bit limit does not", async () => {
    // Such a delay would be cut to 1 ms, with a warning, and the timer would fire every millisecond.
    const warnings: string[] = [];
    const onWarning = (warning: Error) => warnings.push(warning.name);
    process.on("warning", onWarning);
    const cleared = new AbortController();
    abortAfter(cleared, 30)();
    // The timer set for the cleared deadline fires with nothing due.
    await Bun.sleep(60);
    const next = new AbortController();
    const far = new AbortController();
    abortAfter(far, 3_000_000_000);
    abortAfter(next, 40);
    await Bun.sleep(300);
    process.off("warning", onWarning);
    expect([cleared.signal.aborted, next.signal.aborted, far.signal.aborted]).toEqual([false, true, false]);
    expect(warnings).toEqual([]);
    clearDeadline(far, 3_000_000_000);
  });
});
