import { expect, test } from "bun:test";
import { newRequestId, timeOrderedId } from "../src/ids";

test("time-ordered ids carry their time in their first 12 hex digits and sort by it, now or at a time given", () => {
  const now = newRequestId();
  expect(now).toMatch(/^req_[0-9a-f]{12}7[0-9a-f]{19}$/);
  const past = Date.UTC(2026, 0, 2, 3, 4, 5, 6);
  const earlier = newRequestId(past);
  expect(earlier).toMatch(/^req_[0-9a-f]{12}7[0-9a-f]{19}$/);
  expect(Number.parseInt(earlier.slice(4, 16), 16)).toBe(past);
  expect(Math.abs(Number.parseInt(now.slice(4, 16), 16) - Date.now())).toBeLessThan(60_000);
  // A history written at its own times sorts before every id made now, as the ledger's primary key needs.
  expect(earlier < now).toBe(true);
  expect(newRequestId(past + 1) > earlier).toBe(true);
  expect(timeOrderedId("aud_", past).startsWith(`aud_${past.toString(16).padStart(12, "0")}`)).toBe(true);
});
