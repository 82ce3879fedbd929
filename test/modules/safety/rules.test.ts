import { describe, expect, test } from "bun:test";
import type { SafetyRuleConfig } from "../../../src/config/schema";
import { OutputMonitor, outputWindowChars, RuleMatcher } from "../../../src/modules/safety/rules";

const rules: SafetyRuleConfig[] = [
  { id: "RL-1", name: "Short phrase", patterns: [/nerve agent synthesis/i], categories: [], appliesTo: { input: true, output: true } },
  // Matches only when both words fall within 600 characters: longer than the per-piece overlap.
  { id: "RL-2", name: "Long span", patterns: [/\bbegin-marker\b[^!]{400,600}\bend-marker\b/], categories: [], appliesTo: { input: false, output: true } },
];

function monitor(): OutputMonitor {
  return new OutputMonitor(new RuleMatcher(rules, "output"));
}

/** Feeds pieces one by one; the index of the piece that triggered a rule, and which. */
function firstHit(watcher: OutputMonitor, pieces: string[], as: "content" | "reasoning" = "content"): { index: number; rule: string } | undefined {
  for (const [index, piece] of pieces.entries()) {
    const rule = as === "content" ? watcher.observe(piece, undefined) : watcher.observe(undefined, piece);
    if (rule) return { index, rule: rule.id };
  }
  return undefined;
}

/** Splits a text into pieces of `size` characters, as a token-by-token stream sends it. */
function piecesOf(text: string, size: number): string[] {
  const pieces: string[] = [];
  for (let offset = 0; offset < text.length; offset += size) pieces.push(text.slice(offset, offset + size));
  return pieces;
}

/** The index of the piece after which the text so far first contains `phrase`. */
function completingPiece(pieces: string[], phrase: string): number {
  let text = "";
  return pieces.findIndex((piece) => {
    text += piece;
    return text.includes(phrase);
  });
}

describe("output monitor", () => {
  test("a phrase split over tiny pieces is caught by the piece that completes it, not before", () => {
    const text = `${"harmless words. ".repeat(40)}here is nerve agent synthesis and more`;
    const pieces = piecesOf(text, 3);
    const completing = completingPiece(pieces, "nerve agent synthesis");
    expect(firstHit(monitor(), pieces)).toEqual({ index: completing, rule: "RL-1" });
  });

  test("content and reasoning are watched apart: a phrase half in each is no match", () => {
    const watcher = monitor();
    expect(watcher.observe("nerve agent ", undefined)).toBeUndefined();
    expect(watcher.observe(undefined, "synthesis")).toBeUndefined();
    expect(firstHit(monitor(), piecesOf("the nerve agent synthesis", 4), "reasoning")?.rule).toBe("RL-1");
  });

  test("a match longer than the overlap is caught within the window, at most a window's scan interval late", () => {
    const text = `begin-marker ${"x".repeat(500)} end-marker ${"y".repeat(400)}`;
    const pieces = piecesOf(text, 5);
    const completing = completingPiece(pieces, "end-marker");
    const hit = firstHit(monitor(), pieces);
    expect(hit?.rule).toBe("RL-2");
    expect(hit!.index).toBeGreaterThanOrEqual(completing);
    // The whole window is scanned at least every 256 characters.
    expect((hit!.index - completing) * 5).toBeLessThanOrEqual(256);
  });

  test("one piece larger than the window is scanned whole: a phrase at its start is caught", () => {
    const piece = `nerve agent synthesis ${"z".repeat(outputWindowChars * 3)}`;
    expect(firstHit(monitor(), ["hello ", piece])).toEqual({ index: 1, rule: "RL-1" });
  });

  test("long clean streams raise nothing", () => {
    expect(firstHit(monitor(), piecesOf("tok ".repeat(5000), 4))).toBeUndefined();
  });
});
