import type { SafetyConfig, SafetyRuleConfig } from "../../config/schema";
import { readSecret } from "../../config/secrets";
import type { CountableMessage } from "../../tokens/count";
import { ModerationClient } from "./moderation";
import { OutputMonitor, RuleMatcher, ruleForCategories } from "./rules";

/** The rule a text breaks, or undefined. */
export type Verdict = SafetyRuleConfig | undefined;

/**
 * The red-line check: local rules (compiled once, always checked) and an optional external moderation service
 * with a deadline, which fails closed.
 */
export class SafetyService {
  private config!: SafetyConfig;
  private moderation: ModerationClient | undefined;
  private inputRules!: RuleMatcher;
  private outputRules!: RuleMatcher;

  constructor(
    config: SafetyConfig,
    private readonly environment: Record<string, string | undefined> = process.env,
  ) {
    this.reconfigure(config);
  }

  /** Checks the requests that come after it with a new configuration's rules; streams under way keep their monitor's. */
  reconfigure(config: SafetyConfig): void {
    const moderation = config.moderation;
    const apiKey = moderation
      ? readSecret({ env: moderation.apiKeyEnv, file: moderation.apiKeyFile }, "safety.moderation_api_key_file", this.environment)
      : undefined;
    this.inputRules = new RuleMatcher(config.rules, "input");
    this.outputRules = new RuleMatcher(config.rules, "output");
    this.moderation = moderation ? new ModerationClient(moderation.url, moderation.model, apiKey, config.timeoutMs) : undefined;
    this.config = config;
  }

  /**
   * The rule the conversation breaks, if any; a promise only when the external check runs (the local rules answer at
   * once, and an await the request does not need costs every request a turn). The external check's failure rejects
   * with 503 safety_unavailable.
   */
  checkInput(messages: CountableMessage[], signal: AbortSignal): Verdict | Promise<Verdict> {
    if (!this.config.enabled) return undefined;
    for (const message of messages) {
      const rule = this.inputRules.match(message.text);
      if (rule) return rule;
    }
    if (!this.moderation) return undefined;
    const texts = messages.map((message) => message.text).filter(Boolean);
    if (texts.length === 0) return undefined;
    return this.moderated(this.moderation, texts, signal, "input");
  }

  /** The rule a whole answer breaks, if any (local rules, and the external check when `moderate_output` is on). */
  checkOutput(texts: string[], signal: AbortSignal): Verdict | Promise<Verdict> {
    if (!this.config.enabled) return undefined;
    for (const text of texts) {
      const rule = this.outputRules.match(text);
      if (rule) return rule;
    }
    const nonEmpty = texts.filter(Boolean);
    if (!this.moderation || !this.config.moderation?.moderateOutput || nonEmpty.length === 0) return undefined;
    return this.moderated(this.moderation, nonEmpty, signal, "output");
  }

  private async moderated(moderation: ModerationClient, texts: string[], signal: AbortSignal, direction: "input" | "output"): Promise<Verdict> {
    return ruleForCategories(this.config.rules, await moderation.flaggedCategories(texts, signal), direction);
  }

  /** A watcher for a streamed answer; undefined when no rule applies to output. */
  outputMonitor(): OutputMonitor | undefined {
    if (!this.config.enabled || this.outputRules.empty) return undefined;
    return new OutputMonitor(this.outputRules);
  }
}
