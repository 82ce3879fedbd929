// Cost of the red-line rules alone (no external checker), measured in this process: the input check of a typical
// prompt, and the output check of one streamed chunk. Prints {"input_check_us","output_chunk_us","prompt_chars"}.
import { resolveConfig } from "../src/config/load";
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

await timeInput(2000);
timeOutput(20_000);
console.log(
  JSON.stringify({
    prompt_chars: messages.reduce((sum, message) => sum + message.text.length, 0),
    input_check_us: await timeInput(20_000),
    output_chunk_us: timeOutput(200_000),
  }),
);
