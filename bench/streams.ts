// Opens N concurrent streamed chat requests and checks each one: every token arrived and the stream ended with
// [DONE]. Run as its own process. Usage: bun bench/streams.ts URL BODY_FILE HEADERS_JSON N EXPECTED_TOKENS
// Prints {"concurrent","completed","ttft_p50_ms","ttft_p99_ms","seconds"}.
import { quantile } from "./statistics";
const [url, bodyFile, headersJson, count, expectedTokens] = process.argv.slice(2) as [string, string, string, string, string];
const body = await Bun.file(bodyFile).text();
const headers = JSON.parse(headersJson) as Record<string, string>;
const ttfts: number[] = [];
let completed = 0;
const start = performance.now();

async function one(): Promise<void> {
  const began = performance.now();
  try {
    const response = await fetch(url, { method: "POST", headers, body });
    if (response.status !== 200 || !response.body) return;
    const decoder = new TextDecoder();
    let text = "";
    let firstToken = false;
    for await (const bytes of response.body) {
      text += decoder.decode(bytes, { stream: true });
      if (!firstToken && (text.includes('"content":"tok') || text.includes('"reasoning_content":"think'))) {
        firstToken = true;
        ttfts.push(performance.now() - began);
      }
    }
    const tokens = (text.match(/"content":"tok /g) ?? []).length + (text.match(/"reasoning_content":"think /g) ?? []).length;
    if (tokens === Number(expectedTokens) && text.trimEnd().endsWith("data: [DONE]")) completed++;
  } catch {
    // counted as not completed
  }
}

await Promise.all(Array.from({ length: Number(count) }, one));
console.log(
  JSON.stringify({
    concurrent: Number(count),
    completed,
    ttft_p50_ms: quantile(ttfts, 0.5),
    ttft_p99_ms: quantile(ttfts, 0.99),
    seconds: (performance.now() - start) / 1000,
  }),
);
