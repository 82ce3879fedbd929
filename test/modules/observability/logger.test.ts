import { describe, expect, test } from "bun:test";
import { Logger } from "../../../src/modules/observability/logger";
import { eventually } from "../../helpers";

/**
 * A logger on a clock the test moves, and the writes it made (each write's lines). While `failing()` is true, a write
 * throws, as a write to a stdout that is gone does.
 */
function loggerOnClock(level = "info", failing: () => boolean = () => false) {
  const clock = { now: 1_000 };
  const writes: string[][] = [];
  const logger = new Logger(
    level,
    (text) => {
      if (failing()) throw new Error("EPIPE");
      writes.push(text.trimEnd().split("\n"));
    },
    () => clock.now,
  );
  const messages = () => writes.map((lines) => lines.map((line) => (JSON.parse(line) as { message: string }).message));
  return { clock, logger, writes, messages };
}

describe("Logger", () => {
  test("a line after a quiet spell is written at once, in the caller's turn", () => {
    const { logger, messages } = loggerOnClock();
    logger.log("info", { message: "first" });
    expect(messages()).toEqual([["first"]]);
  });

  test("lines within 5 ms of the last write wait, and the first line past it writes them all together", () => {
    const { clock, logger, messages } = loggerOnClock();
    logger.log("info", { message: "a" });
    clock.now += 1;
    logger.log("info", { message: "b" });
    clock.now += 3;
    logger.log("info", { message: "c" });
    expect(messages()).toEqual([["a"]]);
    clock.now += 1;
    logger.log("info", { message: "d" });
    expect(messages()).toEqual([["a"], ["b", "c", "d"]]);
    logger.flush();
  });

  test("the last lines of a burst are written by a timer when no line follows", async () => {
    const { clock, logger, messages } = loggerOnClock();
    logger.log("info", { message: "a" });
    clock.now += 1;
    logger.log("info", { message: "b" });
    expect(messages()).toEqual([["a"]]);
    await eventually(() => messages().length === 2, 2_000);
    expect(messages()).toEqual([["a"], ["b"]]);
  });

  test("flush writes what is buffered, and nothing when nothing is", () => {
    const { clock, logger, writes, messages } = loggerOnClock();
    logger.log("info", { message: "a" });
    clock.now += 1;
    logger.log("warn", { message: "b" });
    logger.flush();
    logger.flush();
    expect(messages()).toEqual([["a"], ["b"]]);
    expect(writes).toHaveLength(2);
  });

  test("a write that fails (stdout gone) drops its lines and does not fail the caller that logs", () => {
    let failing = true;
    const { clock, logger, messages } = loggerOnClock("info", () => failing);
    expect(() => logger.log("info", { message: "lost" })).not.toThrow();
    failing = false;
    clock.now += 10;
    logger.log("info", { message: "kept" });
    expect(messages()).toEqual([["kept"]]);
  });

  test("each line is one JSON object with time and level first; lines below the level are dropped", () => {
    const { clock, logger, writes } = loggerOnClock("warn");
    expect(logger.enabled("info")).toBe(false);
    logger.log("info", { message: "dropped" });
    clock.now += 10;
    logger.log("error", { message: "kept", request_id: "req_1" });
    clock.now += 10;
    logger.log("warn", {});
    const lines = writes.flat();
    expect(lines).toHaveLength(2);
    const kept = JSON.parse(lines[0] as string) as Record<string, unknown>;
    expect(Object.keys(kept)).toEqual(["time", "level", "message", "request_id"]);
    expect(kept).toMatchObject({ level: "error", message: "kept", request_id: "req_1" });
    expect(new Date(kept.time as string).toISOString()).toBe(kept.time as string);
    expect(JSON.parse(lines[1] as string)).toMatchObject({ level: "warn" });
  });
});
