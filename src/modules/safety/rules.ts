import type { SafetyRuleConfig } from "../../config/schema";
import { answerText, type CompletionEvent } from "../../upstream/types";

export type Direction = "input" | "output";

/**
 * The rules of one direction, matched pattern by pattern. Each pattern is tested on its own, not folded into one
 * alternation: the regular expression engine skips ahead on a pattern's few possible first letters, which an
 * alternation of every pattern defeats. bench/safety.ts measures it with the default rules: the alternation is
 * 1.2-2x slower on prose and reasoning text and even on code; only on one word repeated does it sometimes win.
 */
export class RuleMatcher {
  private readonly applicable: readonly SafetyRuleConfig[];

  constructor(rules: readonly SafetyRuleConfig[], direction: Direction) {
    this.applicable = rules.filter((rule) => rule.appliesTo[direction] && rule.patterns.length > 0);
  }

  /** Whether any rule can apply at all. */
  get empty(): boolean {
    return this.applicable.length === 0;
  }

  match(text: string): SafetyRuleConfig | undefined {
    if (!text) return undefined;
    for (const rule of this.applicable) {
      for (const pattern of rule.patterns) if (pattern.test(text)) return rule;
    }
    return undefined;
  }
}

/** The first rule for this direction that lists one of the flagged moderation categories. */
export function ruleForCategories(rules: readonly SafetyRuleConfig[], flagged: readonly string[], direction: Direction): SafetyRuleConfig | undefined {
  return rules.find((rule) => rule.appliesTo[direction] && rule.categories.some((category) => flagged.includes(category)));
}

/** The answer text of a refusal; it names the rule, as the spec requires. */
export function refusalText(rule: SafetyRuleConfig, direction: Direction): string {
  return direction === "input"
    ? `This request was refused under red-line rule ${rule.id} (${rule.name}).`
    : `This answer was stopped under red-line rule ${rule.id} (${rule.name}).`;
}

/** Characters of recent output kept for matching, so a phrase split across chunks is still caught. */
export const outputWindowChars = 1024;
/** Each chunk is matched together with this many characters before it; the whole window every so often. */
const overlapChars = 256;

/** One text stream (content, or reasoning) of an answer being watched. */
class WatchedText {
  /** The last `overlapChars` characters seen. */
  private tail = "";
  /** The last `outputWindowChars` characters as of the last whole-window scan. */
  private window = "";
  /** Characters that arrived since that scan. */
  private unscanned = 0;
  private readonly saved = { tail: "", window: "", unscanned: 0 };

  constructor(private readonly matcher: RuleMatcher) {}

  /**
   * A match must end in the new piece (it was not there before). Matches up to `overlapChars` long are found
   * with the piece that completes them; longer ones, up to the window, by a scan of the whole window at least
   * every `overlapChars` characters. Scanning the whole window on every chunk cost a third of a busy server's
   * CPU with 2,000 streams; rebuilding it on every chunk, or keeping the pieces since the last whole scan, was
   * most of their garbage and live objects. Only two flat strings of bounded length are kept.
   */
  add(piece: string): SafetyRuleConfig | undefined {
    const recent = this.tail + piece;
    this.unscanned += piece.length;
    let rule: SafetyRuleConfig | undefined;
    if (this.unscanned >= overlapChars) {
      // Fewer than overlapChars characters came before this piece since the last whole scan: all are in `recent`.
      this.window = (this.window + recent.slice(-this.unscanned)).slice(-outputWindowChars);
      this.unscanned = 0;
      // A piece longer than the window is scanned whole as well: a match early in it is still new.
      rule = this.matcher.match(this.window) ?? (recent.length > outputWindowChars ? this.matcher.match(recent) : undefined);
    } else {
      rule = this.matcher.match(recent);
    }
    this.tail = recent.length > overlapChars ? recent.slice(-overlapChars) : recent;
    return rule;
  }

  /** Remembers what `add` changes (no allocation: a batch is checked this way on every upstream read). */
  checkpoint(): void {
    this.saved.tail = this.tail;
    this.saved.window = this.window;
    this.saved.unscanned = this.unscanned;
  }

  /** Takes back everything added since the checkpoint. */
  rollback(): void {
    this.tail = this.saved.tail;
    this.window = this.saved.window;
    this.unscanned = this.saved.unscanned;
  }
}

/** Where a streamed answer breaks a rule: the rule, and the event whose piece completed the match. */
export interface OutputBreach {
  rule: SafetyRuleConfig;
  index: number;
}

/**
 * Watches a streamed answer. Content and reasoning are each matched over a sliding window of their latest
 * characters, so a phrase split across chunks is caught when its last piece arrives.
 */
export class OutputMonitor {
  private readonly content: WatchedText;
  private readonly reasoning: WatchedText;

  constructor(matcher: RuleMatcher) {
    this.content = new WatchedText(matcher);
    this.reasoning = new WatchedText(matcher);
  }

  /** The rule the answer now breaks, if any, with this piece added. */
  observe(content: string | undefined, reasoning: string | undefined): SafetyRuleConfig | undefined {
    return (content ? this.content.add(content) : undefined) ?? (reasoning ? this.reasoning.add(reasoning) : undefined);
  }

  /**
   * The first event of a batch (the events of one upstream read) whose piece makes the answer break a rule, if
   * any. The batch's pieces are matched together, one scan where there would be one per event: with 2,000 streams
   * a read carries three events on average, and each scan builds a string of the recent text, the monitor's main
   * cost in memory. Only a batch that matches is taken back and added again piece by piece, to find the event that
   * completed the match (a match that only the joined pieces show is placed at the batch's last piece).
   */
  observeBatch(events: readonly CompletionEvent[]): OutputBreach | undefined {
    let content = "";
    let reasoning = "";
    let deltas = 0;
    let last = -1;
    for (let index = 0; index < events.length; index++) {
      const event = events[index] as CompletionEvent;
      if (event.type !== "delta") continue;
      deltas++;
      last = index;
      if (event.content) content += event.content;
      // A refusal is the answer's text too: a rule must not be passed by text sent in that field instead.
      if (event.refusal) content += event.refusal;
      if (event.reasoning) reasoning += event.reasoning;
    }
    if (deltas === 0) return undefined;
    if (deltas > 1) {
      this.content.checkpoint();
      this.reasoning.checkpoint();
    }
    const rule = this.observe(content, reasoning);
    if (!rule) return undefined;
    if (deltas > 1) {
      this.content.rollback();
      this.reasoning.rollback();
      for (let index = 0; index < events.length; index++) {
        const event = events[index] as CompletionEvent;
        const found = event.type === "delta" ? this.observe(answerText(event.content, event.refusal), event.reasoning) : undefined;
        if (found) return { rule: found, index };
      }
    }
    return { rule, index: last };
  }
}
