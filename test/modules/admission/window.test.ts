import { describe, expect, test } from "bun:test";
import { MemoryAdmissionStore } from "../../../src/modules/admission/memory-store";
import { formatReset } from "../../../src/modules/admission/quota-answers";
import { fiveHoursMs, startOfNextMonth } from "../../../src/usage-periods";
import { RollingWindow } from "../../../src/modules/admission/window";
import { SluiceError } from "../../../src/errors";
import type { PlanConfig } from "../../../src/config/schema";

const t0 = Date.UTC(2026, 10, 22, 10, 0, 30, 500); // not on a minute boundary on purpose

describe("RollingWindow", () => {
  test("usage recorded at t counts until t + 5 h exactly, not a millisecond less or more", () => {
    const window = new RollingWindow();
    window.add(100, t0);
    expect(window.used(t0 + fiveHoursMs - 1)).toBe(100);
    expect(window.used(t0 + fiveHoursMs)).toBe(0);
  });

  test("buckets never let usage leave early: a minute's usage leaves with the latest usage in it", () => {
    const window = new RollingWindow();
    window.add(100, t0);
    window.add(50, t0 + 20_000); // same minute
    window.add(70, t0 + 90_000); // next minute
    expect(window.used(t0 + fiveHoursMs)).toBe(220);
    expect(window.used(t0 + 20_000 + fiveHoursMs)).toBe(70);
    expect(window.used(t0 + 90_000 + fiveHoursMs)).toBe(0);
  });

  test("timeUntilFreed walks the oldest usage first", () => {
    const window = new RollingWindow();
    window.add(100, t0);
    window.add(100, t0 + 600_000);
    const now = t0 + 3_600_000;
    expect(window.timeUntilFreed(50, now)).toBe(t0 + fiveHoursMs - now);
    expect(window.timeUntilFreed(150, now)).toBe(t0 + 600_000 + fiveHoursMs - now);
    expect(window.timeUntilFreed(250, now)).toBeUndefined();
  });

  test("formatReset writes durations as OpenAI does", () => {
    expect(formatReset(0)).toBe("0s");
    expect(formatReset(45_000)).toBe("45s");
    expect(formatReset(61_200)).toBe("1m2s");
    expect(formatReset(fiveHoursMs)).toBe("5h0m0s");
    // The same second again, a new one, then the one before (the last one written is kept).
    expect(formatReset(fiveHoursMs - 1)).toBe("5h0m0s");
    expect(formatReset(fiveHoursMs - 1000)).toBe("4h59m59s");
    expect(formatReset(45_500)).toBe("46s");
    expect(formatReset(44_100)).toBe("45s");
    expect(formatReset(-5)).toBe("0s");
  });
});

describe("MemoryAdmissionStore with an injected clock", () => {
  const plan: PlanConfig = { id: "p", models: ["*"], tokensPer5h: 1000 };
  const request = { organizationId: "org", plan, modelId: "m", promptTokens: 10, maxTokens: 500 };

  function rejection(store: MemoryAdmissionStore, now: number): SluiceError {
    try {
      store.admit(request, now);
    } catch (error) {
      return error as SluiceError;
    }
    throw new Error("admitted");
  }

  test("the 5-hour quota: 429 rate_limit_exceeded, x-should-retry false, Retry-After to the second", () => {
    const store = new MemoryAdmissionStore();
    store.admit(request, t0).settle({ promptTokens: 10, completionTokens: 400 }, t0);
    store.admit(request, t0 + 1000).settle({ promptTokens: 10, completionTokens: 580 }, t0 + 60_000);
    const now = t0 + 2 * 3_600_000 + 250; // 2 h later: 1000 used, full
    const error = rejection(store, now);
    expect(error.code).toBe("rate_limit_exceeded");
    expect(error.type).toBe("rate_limit_error");
    expect(error.headers()["x-should-retry"]).toBe("false");
    // The first 410 tokens leave at t0 + 5 h: enough for a prompt of 10 plus one token.
    const expected = Math.ceil((t0 + fiveHoursMs - now) / 1000);
    expect(error.headers()["retry-after"]).toBe(String(expected));
    expect(() => store.admit(request, t0 + fiveHoursMs - 1)).toThrow(SluiceError);
    expect(store.admit(request, t0 + fiveHoursMs).reservedTokens).toBeGreaterThan(0);
  });

  test("a reservation never exceeds the headroom, so a team with room is never blocked by a worst case", () => {
    const store = new MemoryAdmissionStore();
    store.admit(request, t0).settle({ promptTokens: 10, completionTokens: 900 }, t0); // 910 used, 90 left
    const lease = store.admit({ ...request, maxTokens: 8192 }, t0 + 1);
    expect(lease.reservedTokens).toBe(90);
    expect(lease.headers["x-ratelimit-remaining-tokens"]).toBe("0");
    lease.settle({ promptTokens: 10, completionTokens: 5 }, t0 + 2);
    expect(store.reservedTokens()).toBe(0);
    expect(store.snapshot("org", plan, t0 + 3).fiveHours.used).toBe(925);
  });

  test("a lease settles once: the second call changes nothing", () => {
    const store = new MemoryAdmissionStore();
    const lease = store.admit(request, t0);
    lease.settle({ promptTokens: 10, completionTokens: 10 }, t0);
    lease.settle({ promptTokens: 10, completionTokens: 10 }, t0);
    expect(store.inFlight()).toBe(0);
    expect(store.snapshot("org", plan, t0).fiveHours.used).toBe(20);
  });

  test("the monthly quota: 429 insufficient_quota, Retry-After until 00:00 UTC on the 1st; it resets then", () => {
    const monthly: PlanConfig = { id: "m", models: ["*"], tokensPerMonth: 100 };
    const store = new MemoryAdmissionStore();
    const lastDay = Date.UTC(2026, 10, 30, 23, 59, 0);
    store.admit({ ...request, plan: monthly }, lastDay).settle({ promptTokens: 10, completionTokens: 90 }, lastDay);
    const now = lastDay + 1000;
    let error: SluiceError | undefined;
    try {
      store.admit({ ...request, plan: monthly }, now);
    } catch (caught) {
      error = caught as SluiceError;
    }
    expect(error?.code).toBe("insufficient_quota");
    expect(error?.status).toBe(429);
    expect(error?.headers()["x-should-retry"]).toBe("false");
    expect(error?.headers()["retry-after"]).toBe(String(Math.ceil((startOfNextMonth(now) - now) / 1000)));
    expect(error?.headers()["retry-after"]).toBe("59");
    expect(store.admit({ ...request, plan: monthly }, Date.UTC(2026, 11, 1)).reservedTokens).toBeGreaterThan(0);
  });

  test("the concurrency cap: 429 rate_limit_exceeded with a short Retry-After and no x-should-retry", () => {
    const capped: PlanConfig = { id: "c", models: ["*"], maxConcurrency: 2 };
    const store = new MemoryAdmissionStore();
    const leases = [store.admit({ ...request, plan: capped }, t0), store.admit({ ...request, plan: capped }, t0)];
    let error: SluiceError | undefined;
    try {
      store.admit({ ...request, plan: capped }, t0);
    } catch (caught) {
      error = caught as SluiceError;
    }
    expect(error?.code).toBe("rate_limit_exceeded");
    expect(error?.headers()).toEqual({ "retry-after": "1" });
    leases[0]?.settle(null, t0);
    expect(() => store.admit({ ...request, plan: capped }, t0)).not.toThrow();
  });
});
