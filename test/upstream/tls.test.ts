// An upstream behind HTTPS whose certificate comes from a private CA, as a model server inside a company often is.
// test/fixtures/tls holds such a CA and a certificate it signed for localhost and 127.0.0.1, valid for a century (the
// CA's key was thrown away once it had signed). Trusted through NODE_EXTRA_CA_CERTS; named by `sluice doctor` when not.
import { afterAll, expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import OpenAI from "openai";
import { startFakeUpstream } from "../fake-upstream";
import { repositoryRoot, temporaryDirectory } from "../helpers";
import { sluiceCommand, sluiceEnvironment, startSluiceProcess, type SluiceProcess } from "../support/sluice-process";

const fixtures = join(repositoryRoot, "test/fixtures/tls");
const trust = { NODE_EXTRA_CA_CERTS: join(fixtures, "ca.pem") };
const upstream = startFakeUpstream({
  tls: { cert: readFileSync(join(fixtures, "localhost.pem"), "utf8"), key: readFileSync(join(fixtures, "localhost.key"), "utf8") },
});
/** A second server for the same model, over plain HTTP. */
const plain = startFakeUpstream();
const directory = temporaryDirectory();
afterAll(async () => {
  await Promise.all([upstream.stop(), plain.stop()]);
  directory.remove();
});

const configPath = join(directory.path, "sluice.toml");
await Bun.write(
  configPath,
  `[[models]]\nid = "m"\nbackend = "openai"\nbase_url = "${upstream.url}"\nupstream_model = "usage-10-5"\n\n` +
    `[[models]]\nid = "pair"\nbackend = "openai"\nbase_url = ["${upstream.url}", "${plain.url}"]\nupstream_model = "usage-10-5"\nbreaker_failures = 100\n\n` +
    `[[plans]]\nid = "default"\nmodels = ["*"]\n`,
);
const environment = sluiceEnvironment(join(directory.path, "sluice.db"), configPath);
expect(sluiceCommand(environment, "org", "create", "acme").code).toBe(0);
const key = sluiceCommand(environment, "key", "create", "--org", "acme").stdout.trim().split("\n").at(-1) as string;

/** `sluice doctor`, run without blocking this process: the fake upstream it reaches lives here. */
async function doctor(extra: Record<string, string>): Promise<{ code: number; stdout: string }> {
  const child = Bun.spawn([process.execPath, join(repositoryRoot, "src/main.ts"), "doctor"], {
    env: { ...environment, ...extra },
    stdout: "pipe",
    stderr: "pipe",
  });
  const stdout = await new Response(child.stdout).text();
  return { code: await child.exited, stdout };
}

async function withServer(extra: Record<string, string>, run: (client: OpenAI) => Promise<void>): Promise<void> {
  const server: SluiceProcess = await startSluiceProcess({ ...environment, ...extra });
  try {
    await run(new OpenAI({ baseURL: `${server.url}/v1`, apiKey: key, maxRetries: 0 }));
  } finally {
    server.child.kill("SIGTERM");
    await server.child.exited;
  }
}

test("with the private CA in NODE_EXTRA_CA_CERTS, answers come over HTTPS, whole and streamed; doctor finds the server reachable", async () => {
  expect(upstream.url).toStartWith("https://");
  await withServer(trust, async (client) => {
    const answer = await client.chat.completions.create({ model: "m", messages: [{ role: "user", content: "hi" }] });
    expect(answer.usage).toMatchObject({ prompt_tokens: 10, completion_tokens: 5 });
    const stream = await client.chat.completions.create({ model: "m", messages: [{ role: "user", content: "hi" }], stream: true });
    let chunks = 0;
    for await (const _chunk of stream) chunks++;
    expect(chunks).toBeGreaterThan(0);
  });
  const checked = await doctor(trust);
  expect(checked.stdout).toContain(`model m: ${upstream.url} reachable`);
});

test("without it, nothing reaches the upstream: the caller gets a 502 naming the certificate, a second server takes the call, and doctor says what to set", async () => {
  const before = upstream.bodies.length;
  await withServer({}, async (client) => {
    const error = await client.chat.completions.create({ model: "m", messages: [{ role: "user", content: "hi" }] }).catch((caught: unknown) => caught);
    expect(error).toBeInstanceOf(OpenAI.APIError);
    expect((error as InstanceType<typeof OpenAI.APIError>).status).toBe(502);
    expect((error as Error).message).toContain("unable to verify the first certificate");
    // The handshake failed before the request was sent: another server of the model takes it.
    for (let index = 0; index < 4; index++) {
      const answer = await client.chat.completions.create({ model: "pair", messages: [{ role: "user", content: "hi" }] });
      expect(answer.usage?.total_tokens).toBe(15);
    }
    expect(plain.bodies.length).toBe(4);
  });
  expect(upstream.bodies.length).toBe(before);
  const checked = await doctor({});
  expect(checked.code).not.toBe(0);
  expect(checked.stdout).toContain("unable to verify the first certificate");
  expect(checked.stdout).toContain("NODE_EXTRA_CA_CERTS=/path/to/ca.pem");
});
