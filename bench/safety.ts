// Cost of the red-line rules alone (no external checker), measured in this process: the input check of a typical
// prompt, and the output check of one streamed chunk. It also measures the choice the output check rests on: the
// default patterns tested one by one against the same patterns folded into one alternation, on 260-character
// windows of several kinds of text. Prints {"input_check_us","output_chunk_us","prompt_chars","alternation_vs_one_by_one"}.
import { defaultSafetyRules } from "../src/config/default-rules";
import { compilePattern, resolveConfig } from "../src/config/load";
import { SafetyService } from "../src/modules/safety/service";

const config = resolveConfig({});
const safety = new SafetyService(config.safety);
const signal = new AbortController().signal;
const paragraph = "Please review the attached quarterly report and summarise the main risks for the board, with numbers. ";
const messages = [
  { role: "system", text: "You are a careful assistant for a finance team. Answer briefly and cite figures." },
  { role: "user", text: paragraph.repeat(20) },
];

async function timeInput(rounds: number): Promise<number> {
  const started = performance.now();
  for (let round = 0; round < rounds; round++) await safety.checkInput(messages, signal);
  return ((performance.now() - started) * 1000) / rounds;
}

function timeOutput(chunks: number): number {
  const monitor = safety.outputMonitor();
  const words = paragraph.split(" ");
  const started = performance.now();
  for (let index = 0; index < chunks; index++) monitor?.observe(`${words[index % words.length]} `, undefined);
  return ((performance.now() - started) * 1000) / chunks;
}

const windows: Record<string, string> = {
  benchmark_tokens: "tok ",
  prose: "The model considers the question carefully and then produces a short answer about the weather in Paris, which is mild. ",
  reasoning: "Okay, so the user wants to know how to make a sandwich. Let me think step by step: first, take two slices of bread. ",
  code: "function parse(input: string) {\n  for (const token of input.split(/\\s+/)) {\n    if (token === 'make') build(token);\n  }\n}\n",
};

/** How much slower one alternation of every default pattern is than each pattern alone, per kind of text. */
function alternationVsOneByOne(): Record<string, number> {
  const patterns = defaultSafetyRules.flatMap((rule) => (rule.patterns ?? []).map(compilePattern));
  const alternation = new RegExp(patterns.map((pattern) => `(?:${pattern.source})`).join("|"), "i");
  const time = (test: (text: string) => boolean, variants: string[]) => {
    let best = Number.POSITIVE_INFINITY;
    for (let run = 0; run < 3; run++) {
      const started = performance.now();
      for (let index = 0; index < 50_000; index++) test(variants[index & 1] as string);
      best = Math.min(best, performance.now() - started);
    }
    return best;
  };
  const ratios: Record<string, number> = {};
  for (const [name, text] of Object.entries(windows)) {
    const window = text.repeat(Math.ceil(260 / text.length)).slice(0, 260);
    // A changing last character keeps the engine from answering a repeated question from a cache.
    const variants = [`${window}a`, `${window}b`];
    ratios[name] = time((value) => alternation.test(value), variants) / time((value) => patterns.some((pattern) => pattern.test(value)), variants);
  }
  return ratios;
}

await timeInput(2000);
timeOutput(20_000);
console.log(
  JSON.stringify({
    prompt_chars: messages.reduce((sum, message) => sum + message.text.length, 0),
    input_check_us: await timeInput(20_000),
    output_chunk_us: timeOutput(200_000),
    alternation_vs_one_by_one: alternationVsOneByOne(),
  }),
);
