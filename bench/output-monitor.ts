// The red-line output check's cost per streamed piece: Sluice's OutputMonitor (default rules, 4-character pieces,
// as a token-by-token stream sends them), and, for the choice it rests on, the default patterns tested one by one
// against the same patterns folded into one alternation, on windows of 260 characters of several kinds of text.
// Usage: bun bench/output-monitor.ts   (prints JSON; part of neither make bench nor CI: a design measurement)
import { defaultSafetyRules } from "../src/config/default-rules";
import { compilePattern } from "../src/config/load";
import { OutputMonitor, RuleMatcher } from "../src/modules/safety/rules";

const texts: Record<string, string> = {
  benchmark_tokens: "tok ".repeat(65),
  prose:
    "The model considers the question carefully and then produces a short answer about the weather in Paris, which is mild today. It adds that rain may come later, and suggests an umbrella. ".repeat(
      2,
    ),
  reasoning:
    "Okay, so the user wants to know how to make a sandwich. Let me think step by step: first, take two slices of bread, then spread some butter, then add the cheese and ham. Maybe I should mention that they can produce variations. ",
  code: "function parse(input: string) {\n  const tokens = input.split(/\\s+/);\n  for (const token of tokens) {\n    if (token === 'make') build(token);\n    else produce(token, { design: true, plan: 'to' });\n  }\n  return tokens;\n}\n",
};

const patterns = defaultSafetyRules.flatMap((rule) => (rule.patterns ?? []).map(compilePattern));
const folded = new RegExp(patterns.map((pattern) => `(?:${pattern.source})`).join("|"), "i");
const rules = defaultSafetyRules.map((rule) => ({
  id: rule.id,
  name: rule.name,
  patterns: (rule.patterns ?? []).map(compilePattern),
  categories: [],
  appliesTo: { input: true, output: true },
}));
const matcher = new RuleMatcher(rules, "output");

/** Microseconds per call, best of three runs (the machine's noise only ever adds). */
function microseconds(calls: number, body: (index: number) => unknown): number {
  let best = Number.POSITIVE_INFINITY;
  for (let run = 0; run < 3; run++) {
    const started = performance.now();
    for (let index = 0; index < calls; index++) body(index);
    best = Math.min(best, ((performance.now() - started) * 1000) / calls);
  }
  return best;
}

const results: Record<string, unknown> = {};
for (const [name, text] of Object.entries(texts)) {
  const window = text.repeat(Math.ceil(260 / text.length)).slice(0, 260);
  // A changing last character keeps the engine from answering a repeated question from a cache.
  const variants = [`${window}a`, `${window}b`];
  const separate = microseconds(100_000, (index) => patterns.some((pattern) => pattern.test(variants[index & 1] as string)));
  const alternation = microseconds(100_000, (index) => folded.test(variants[index & 1] as string));
  const stream = text.repeat(Math.ceil(20_000 / text.length));
  const monitor = microseconds(5, () => {
    const watcher = new OutputMonitor(matcher);
    for (let offset = 0; offset < stream.length; offset += 4) watcher.observe(stream.slice(offset, offset + 4), undefined);
  });
  results[name] = {
    monitor_us_per_piece: monitor / Math.ceil(stream.length / 4),
    window_us_patterns_one_by_one: separate,
    window_us_one_alternation: alternation,
    alternation_vs_one_by_one: alternation / separate,
  };
}
console.log(JSON.stringify(results, null, 2));
