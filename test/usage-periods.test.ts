import { expect, test } from "bun:test";
import { monthOf, startOfMonth, startOfNextMonth } from "../src/usage-periods";

test("monthOf gives each time its own UTC month, across boundaries and back again (its last month is remembered)", () => {
  const lastMillisecondOfJanuary = Date.UTC(2026, 1, 1) - 1;
  const cases: [number, number][] = [
    [Date.UTC(2026, 0, 15), 2026 * 12],
    [lastMillisecondOfJanuary, 2026 * 12],
    [Date.UTC(2026, 1, 1), 2026 * 12 + 1],
    [lastMillisecondOfJanuary, 2026 * 12],
    [Date.UTC(2026, 11, 31, 23, 59, 59, 999), 2026 * 12 + 11],
    [Date.UTC(2027, 0, 1), 2027 * 12],
    [Date.UTC(1999, 5, 30), 1999 * 12 + 5],
    [Date.UTC(2027, 0, 1) - 1, 2026 * 12 + 11],
  ];
  for (const [time, month] of cases) expect(monthOf(time)).toBe(month);
  for (let time = Date.UTC(2026, 0, 28); time < Date.UTC(2026, 2, 3); time += 3_600_000 * 7) {
    expect(monthOf(time)).toBe(new Date(time).getUTCFullYear() * 12 + new Date(time).getUTCMonth());
    expect(startOfMonth(time) <= time && time < startOfNextMonth(time)).toBe(true);
  }
  expect(Number.isNaN(monthOf(Number.NaN))).toBe(true);
  expect(monthOf(Date.UTC(2026, 1, 10))).toBe(2026 * 12 + 1);
});
