import { describe, expect, test } from "bun:test";
import { join } from "node:path";
import { countTokens } from "gpt-tokenizer/encoding/cl100k_base";
import { countChatTokens, countTextTokens, countTexts } from "../../src/tokens/count";

const asText = { disallowedSpecial: new Set<string>() };

describe("counting on the tokenizer's thread", () => {
  test("300 counts at once each get their own texts' counts, as gpt-tokenizer gives them in this thread", async () => {
    const batches = Array.from({ length: 300 }, (_, index) => [`${"reasoning ".repeat(index)}#${index}`, "", `émoji 🚀 ${index * 7919}`]);
    const counted = await Promise.all(batches.map((texts) => countTexts(texts)));
    expect(counted).toEqual(batches.map((texts) => texts.map((text) => countTokens(text, asText))));
    expect(counted[299]![0]).toBeGreaterThan(300);
  });

  test("the chat format: 3 tokens a message and 3 for the reply around each role and text", async () => {
    expect(await countTextTokens("hello world")).toBe(2);
    expect(await countChatTokens([])).toBe(3);
    expect(await countChatTokens([{ role: "user", text: "hi" }])).toBe(3 + 3 + 1 + 1);
    const conversation = [
      { role: "system", text: "Be brief." },
      { role: "user", text: "What is 2+2?" },
    ];
    const expected = 3 + conversation.reduce((total, message) => total + 3 + countTokens(message.role) + countTokens(message.text), 0);
    expect(await countChatTokens(conversation)).toBe(expected);
  });

  test("a text naming a special token is counted as its characters, not refused", async () => {
    expect(await countTextTokens("<|endoftext|>")).toBe(countTokens("<|endoftext|>", asText));
    expect(await countTextTokens("<|endoftext|>")).toBeGreaterThan(1);
  });

  test("a tokenizer's thread that exits fails the counts it owed, and the next count starts a new thread", async () => {
    // The first thread made exits as soon as it is asked (as a thread killed by an error outside a count would),
    // before it answers; the next thread is a real one.
    const script = `
      const RealWorker = globalThis.Worker;
      let made = 0;
      globalThis.Worker = class extends RealWorker {
        constructor(...parameters) {
          super(...parameters);
          if (++made === 1) this.postMessage = () => this.terminate();
        }
      };
      const { countTexts } = await import(${JSON.stringify(join(import.meta.dir, "../../src/tokens/count.ts"))});
      const first = await countTexts(["hello world"]).then(() => "answered", (error) => error.message);
      const second = await countTexts(["hello world"]);
      console.log(JSON.stringify({ first, second, made }));
    `;
    const child = Bun.spawn([process.execPath, "-e", script], { stdout: "pipe", stderr: "pipe" });
    const exitCode = await Promise.race([child.exited, Bun.sleep(20_000).then(() => "still running")]);
    if (exitCode === "still running") child.kill();
    expect(exitCode).toBe(0);
    expect(JSON.parse(await new Response(child.stdout).text())).toEqual({
      first: "the tokenizer's thread stopped: it exited",
      second: [2],
      made: 2,
    });
  }, 30_000);

  test("the server's own thread never loads the tables, and an idle tokenizer does not keep a process alive", async () => {
    const script = `
      const { countTexts } = await import(${JSON.stringify(join(import.meta.dir, "../../src/tokens/count.ts"))});
      const counts = await countTexts(["hello world", "a much longer sentence than that"]);
      const loaded = Object.keys(require.cache).filter((path) => path.includes("gpt-tokenizer")).length;
      console.log(JSON.stringify({ counts, loaded }));
    `;
    const child = Bun.spawn([process.execPath, "-e", script], { stdout: "pipe", stderr: "pipe" });
    // Exits on its own once the counts are in: the thread is no longer referenced.
    const exitCode = await Promise.race([child.exited, Bun.sleep(20_000).then(() => "still running")]);
    if (exitCode === "still running") child.kill();
    expect(exitCode).toBe(0);
    expect(JSON.parse(await new Response(child.stdout).text())).toEqual({ counts: [2, 6], loaded: 0 });
  }, 30_000);
});
