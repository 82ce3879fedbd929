import { describe, expect, test } from "bun:test";
import type { SafetyRuleConfig } from "../../../src/config/schema";
import { OutputMonitor, outputWindowChars, RuleMatcher } from "../../../src/modules/safety/rules";
import type { CompletionEvent } from "../../../src/upstream/types";

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

/**
 * Feeds pieces as upstream reads carry them: batches of `sizes` (in turn) content events, a usage event among them
 * now and then; the index (among the pieces) of the event reported as completing a match, and the rule.
 */
function firstBatchHit(watcher: OutputMonitor, pieces: string[], sizes: number[]): { index: number; rule: string } | undefined {
  let next = 0;
  for (let read = 0; next < pieces.length; read++) {
    const size = sizes[read % sizes.length] as number;
    const batch: CompletionEvent[] = [];
    const pieceAt: number[] = [];
    for (const piece of pieces.slice(next, next + size)) {
      if (read % 3 === 1) batch.push({ type: "usage", usage: { promptTokens: 1, completionTokens: 1, reasoningTokens: 0, cachedTokens: 0 } });
      pieceAt[batch.length] = next++;
      batch.push({ type: "delta", content: piece });
    }
    const breach = watcher.observeBatch(batch);
    if (breach) return { index: pieceAt[breach.index] as number, rule: breach.rule.id };
  }
  return undefined;
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
    expect(firstBatchHit(monitor(), piecesOf("tok ".repeat(5000), 4), [1, 3, 7])).toBeUndefined();
  });

  test("the pieces of one read are matched together, and the event that completed the match is the one reported", () => {
    const text = `${"harmless words. ".repeat(40)}here is nerve agent synthesis and more`;
    for (const size of [1, 2, 3, 5]) {
      const pieces = piecesOf(text, size);
      const completing = completingPiece(pieces, "nerve agent synthesis");
      for (const sizes of [[1], [2], [3], [4, 1, 7], [16]]) expect(firstBatchHit(monitor(), pieces, sizes)).toEqual({ index: completing, rule: "RL-1" });
    }
  });

  test("a batch of content and reasoning events: a match in either is placed at its own event", () => {
    const watcher = monitor();
    const batch: CompletionEvent[] = [
      { type: "delta", reasoning: "the nerve agent " },
      { type: "delta", content: "nerve agent " },
      { type: "delta", content: "is not discussed" },
      { type: "delta", reasoning: "synthesis" },
      { type: "finish", reason: "stop" },
    ];
    expect(watcher.observeBatch(batch)).toEqual({ rule: rules[0] as SafetyRuleConfig, index: 3 });
    // Half in each of two reads, and across content and reasoning: no match.
    const other = monitor();
    expect(other.observeBatch([{ type: "delta", content: "nerve agent " }])).toBeUndefined();
    expect(
      other.observeBatch([
        { type: "delta", reasoning: "synthesis" },
        { type: "finish", reason: "stop" },
      ]),
    ).toBeUndefined();
  });

  test("a match longer than the overlap is found in batches no later than piece by piece", () => {
    const text = `begin-marker ${"x".repeat(500)} end-marker ${"y".repeat(400)}`;
    const pieces = piecesOf(text, 5);
    const single = firstHit(monitor(), pieces);
    const completing = completingPiece(pieces, "end-marker");
    for (const sizes of [[2], [3, 5], [9]]) {
      const hit = firstBatchHit(monitor(), pieces, sizes);
      expect(hit?.rule).toBe("RL-2");
      expect(hit!.index).toBeGreaterThanOrEqual(completing);
      expect(hit!.index).toBeLessThanOrEqual(single!.index);
    }
  });
});
