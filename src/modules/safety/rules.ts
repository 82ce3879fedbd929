import type { SafetyRuleConfig } from "../../config/schema";

export type Direction = "input" | "output";

/** The first rule for this direction with a pattern that matches the text. */
export function matchRule(rules: readonly SafetyRuleConfig[], text: string, direction: Direction): SafetyRuleConfig | undefined {
  if (!text) return undefined;
  for (const rule of rules) {
    if (!rule.appliesTo[direction]) continue;
    for (const pattern of rule.patterns) if (pattern.test(text)) return rule;
  }
  return undefined;
}

/**
 * The rules of one direction folded into at most two regular expressions (one per set of flags), so that a text
 * is scanned twice rather than once per pattern; which rule matched is worked out only after a hit.
 */
export class RuleMatcher {
  private readonly combined: RegExp[];

  constructor(
    private readonly rules: readonly SafetyRuleConfig[],
    private readonly direction: Direction,
  ) {
    const byFlags = new Map<string, string[]>();
    for (const rule of rules) {
      if (!rule.appliesTo[direction]) continue;
      for (const pattern of rule.patterns) byFlags.set(pattern.flags, [...(byFlags.get(pattern.flags) ?? []), pattern.source]);
    }
    this.combined = [...byFlags]
      .map(([flags, sources]) => {
        // A back-reference would point at the wrong group once patterns are joined: keep such sets apart.
        if (sources.some((source) => /\\[1-9]|\\k</.test(source))) return undefined;
        return new RegExp(sources.map((source) => `(?:${source})`).join("|"), flags);
      })
      .filter((pattern): pattern is RegExp => pattern !== undefined);
    if (this.combined.length !== byFlags.size) this.combined = [];
  }

  /** Whether any rule can apply at all. */
  get empty(): boolean {
    return !this.rules.some((rule) => rule.appliesTo[this.direction] && rule.patterns.length > 0);
  }

  match(text: string): SafetyRuleConfig | undefined {
    if (!text) return undefined;
    if (this.combined.length > 0 && !this.combined.some((pattern) => pattern.test(text))) return undefined;
    return matchRule(this.rules, text, this.direction);
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
  private window = "";
  private sinceFullScan = 0;

  constructor(private readonly matcher: RuleMatcher) {}

  /**
   * A match must end in the new piece (it was not there before). Matches up to `overlapChars` long are found
   * with the piece that completes them; longer ones, up to the window, by a scan of the whole window at least
   * every `overlapChars` characters. Scanning the whole window on every chunk cost a third of a busy server's
   * CPU with 2,000 streams.
   */
  add(piece: string): SafetyRuleConfig | undefined {
    this.window = (this.window + piece).slice(-outputWindowChars);
    this.sinceFullScan += piece.length;
    if (this.sinceFullScan >= overlapChars) {
      this.sinceFullScan = 0;
      return this.matcher.match(this.window);
    }
    return this.matcher.match(this.window.slice(-(piece.length + overlapChars)));
  }
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
}
