import { afterAll, expect, test } from "bun:test";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { eventually, repositoryRoot, rowInDatabaseFile, temporaryDirectory } from "./helpers";
import { startSluiceProcess } from "./support/sluice-process";

const directory = temporaryDirectory();
afterAll(() => directory.remove());

// `make build` must give one executable that carries its migrations and assets and runs with no node_modules.
test("dist/sluice runs from another directory: creates an org and a key, serves the demo model", async () => {
  const build = Bun.spawnSync(["make", "-s", "build"], { cwd: repositoryRoot, stdout: "pipe", stderr: "pipe" });
  expect(build.stderr.toString()).not.toContain("error");
  expect(build.exitCode).toBe(0);
  const executable = join(repositoryRoot, "dist/sluice");
  expect(existsSync(executable)).toBe(true);
  const environment = { PATH: "/usr/bin:/bin", HOME: directory.path, SLUICE_PORT: "0" };
  const run = (...args: string[]) => Bun.spawnSync([executable, ...args], { cwd: directory.path, env: environment, stdout: "pipe", stderr: "pipe" });
  expect(run("org", "create", "acme").exitCode).toBe(0);
  const key = run("key", "create", "--org", "acme").stdout.toString().trim().split("\n").at(-1) as string;
  expect(existsSync(join(directory.path, "data/sluice.db"))).toBe(true);
  const { url, child: server } = await startSluiceProcess(environment, [executable, "serve"], directory.path);
  try {
    const response = await fetch(`${url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "sluice-demo", messages: [{ role: "user", content: "hello there" }] }),
    });
    const body = (await response.json()) as { choices: { message: { content: string } }[]; usage: { prompt_tokens: number } };
    expect(response.status).toBe(200);
    expect(body.choices[0]?.message.content).toContain("2 words");
    // The demo counts its usage with the tokenizer, an entry point of its own (loaded on first use): 3 tokens of
    // framing, 3 for the message, 1 for "user", 2 for "hello there".
    expect(body.usage.prompt_tokens).toBe(9);
    // The ledger's writer is an extra entry point of the executable. Rows are staged on the server's thread, and
    // within about 100 ms the writer moves them and checkpoints: after some forty more answers the first row reaches
    // the database file itself, without its WAL (the writer ran, and the WAL does not grow for ever).
    for (let index = 0; index < 40; index++) {
      const more = await fetch(`${url}/v1/chat/completions`, {
        method: "POST",
        headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
        body: JSON.stringify({ model: "sluice-demo", messages: [{ role: "user", content: "hello there" }] }),
      });
      expect(more.status).toBe(200);
      await more.arrayBuffer();
    }
    const inFile = () => rowInDatabaseFile(join(directory.path, "data/sluice.db"), response.headers.get("x-request-id") as string);
    // A copy taken while the writer checkpoints can be torn and miss the row: only a check that sees it ends the wait.
    await eventually(inFile, 5000);
  } finally {
    server.kill();
    await server.exited;
  }
}, 120_000);
