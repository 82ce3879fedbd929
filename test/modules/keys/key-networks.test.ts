// A key bound to networks, its own or its organization's: used from any other address, every API refuses it with 401
// ip_not_authorized before its body is read; the CLI and the console set the networks, checked; a change applies to
// the key's next request and is audited; a rotation keeps them. The address behind trusted proxies: test/http/client-address.test.ts.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import Anthropic from "@anthropic-ai/sdk";
import { checkNetworks, listHas, maxNetworks, networkList, NetworkListError } from "../../../src/modules/keys/networks";
import { ConsoleClient, consolePassword } from "../console/console-client";
import { sluiceCommand, withCliOrganization } from "../../support/sluice-process";
import { capturingLogger, eventually, fakeModel, refusal, startSluice, testActor, useFakeUpstream, type TestSluice } from "../../helpers";

const upstream = useFakeUpstream();
const messages = [{ role: "user" as const, content: "Hello" }];

test("checkNetworks: addresses and CIDR ranges of both families, trimmed, repeats dropped; anything else refused by name", () => {
  expect(checkNetworks([" 10.0.0.0/8", "203.0.113.7", "2001:db8::/32", "10.0.0.0/8", "::1"])).toEqual(["10.0.0.0/8", "203.0.113.7", "2001:db8::/32", "::1"]);
  expect(checkNetworks(null)).toBeNull();
  expect(() => checkNetworks([])).toThrow(NetworkListError);
  expect(() => checkNetworks(["10.0.0.1", " "])).toThrow("give at least one address or CIDR range");
  for (const wrong of ["10.0.0.0/33", "10.0.0/8", "example.com", "10.0.0.0/", "10.0.0.0/8/8", "2001:db8::/129", "10.0.0.0/+8", "10.0.0.0/0x8", "1.2.3.4:80"]) {
    expect(() => checkNetworks(["10.0.0.1", wrong])).toThrow(`"${wrong}" is not an IP address or CIDR range`);
  }
  const many = Array.from({ length: maxNetworks + 1 }, (_, index) => `10.0.${index}.0/24`);
  expect(() => checkNetworks(many)).toThrow(`at most ${maxNetworks}`);
  expect(checkNetworks(many.slice(1))).toHaveLength(maxNetworks);
});

test("networkList: an address matches its range, of either family, and an IPv4 address written as IPv4-mapped IPv6; what is not an entry allows nothing", () => {
  const list = networkList(["10.0.0.0/8", "203.0.113.7", "2001:db8::/32", "not a network"]);
  const has = (address: string) => listHas(list, address);
  expect([has("10.255.0.1"), has("11.0.0.1"), has("203.0.113.7"), has("203.0.113.8")]).toEqual([true, false, true, false]);
  expect([has("2001:db8::1"), has("2001:db9::1"), has("::ffff:10.1.2.3"), has("not an address")]).toEqual([true, false, true, false]);
  expect(listHas(networkList(["not a network"]), "10.0.0.1")).toBe(false);
});

describe("a key bound to networks, on a server with no trusted proxy (the tests' requests come from 127.0.0.1)", () => {
  let sluice: TestSluice;
  let organizationId: string;
  const logs = capturingLogger();

  beforeAll(async () => {
    sluice = await startSluice({ models: [fakeModel(upstream.url, "m", "usage-10-5")] }, { logger: logs.logger });
    organizationId = (await sluice.organizations.findByName("acme"))?.id as string;
  });
  afterAll(async () => {
    await sluice.stop();
  });

  /** The last log line of a key's requests (of this status, when given), once the logger has written it. */
  async function logLineOf(keyId: string, status?: number): Promise<Record<string, unknown>> {
    const find = () =>
      logs.lines.findLast((entry) => entry.message === "request" && entry.key_id === keyId && (status === undefined || entry.status === status));
    await eventually(() => find() !== undefined);
    return find() as Record<string, unknown>;
  }

  async function keyFor(networks: string[] | null): Promise<{ id: string; secret: string }> {
    const { key, secret } = await sluice.keys.create({ organizationId, name: "bound", networks }, testActor);
    return { id: key.id, secret };
  }

  test("from inside its networks every API answers: chat, Responses, Messages, count_tokens, models, embeddings", async () => {
    const key = await keyFor(["192.0.2.0/24", "127.0.0.0/8"]);
    const client = sluice.client({ apiKey: key.secret });
    expect((await client.chat.completions.create({ model: "m", messages })).choices).toHaveLength(1);
    expect((await client.responses.create({ model: "m", input: "Hi" })).status).toBe("completed");
    expect((await client.models.list()).data.map((model) => model.id)).toEqual(["m"]);
    expect((await client.embeddings.create({ model: "m", input: "Hi" })).data).toHaveLength(1);
    const anthropic = new Anthropic({ baseURL: sluice.url, apiKey: key.secret, maxRetries: 0 });
    expect((await anthropic.messages.create({ model: "m", max_tokens: 10, messages })).type).toBe("message");
    expect((await anthropic.messages.countTokens({ model: "m", messages })).input_tokens).toBeGreaterThan(0);
    expect((await logLineOf(key.id)).client_ip).toBe("127.0.0.1");
  });

  test("from outside them every API refuses it: 401 ip_not_authorized naming the address, nothing sent upstream, the address in the log line", async () => {
    const key = await keyFor(["10.0.0.0/8", "2001:db8::/32"]);
    const client = sluice.client({ apiKey: key.secret, maxRetries: 0 });
    const calls = upstream.bodies.length;
    const refused = await refusal(() => client.chat.completions.create({ model: "m", messages }));
    expect(refused).toEqual({
      status: 401,
      code: "ip_not_authorized",
      message: "This API key cannot be used from the address 127.0.0.1: it is bound to other networks.",
    });
    expect((await refusal(() => client.chat.completions.create({ model: "m", messages, stream: true }))).code).toBe("ip_not_authorized");
    expect((await refusal(() => client.responses.create({ model: "m", input: "Hi" }))).code).toBe("ip_not_authorized");
    expect((await refusal(() => client.completions.create({ model: "m", prompt: "Hi" }))).code).toBe("ip_not_authorized");
    expect((await refusal(() => client.models.list())).code).toBe("ip_not_authorized");
    expect((await refusal(() => client.embeddings.create({ model: "m", input: "Hi" }))).code).toBe("ip_not_authorized");
    const anthropic = new Anthropic({ baseURL: sluice.url, apiKey: key.secret, maxRetries: 0 });
    for (const call of [
      () => anthropic.messages.create({ model: "m", max_tokens: 10, messages }),
      () => anthropic.messages.countTokens({ model: "m", messages }),
    ]) {
      const error = (await call().catch((caught: unknown) => caught)) as InstanceType<typeof Anthropic.APIError>;
      expect(error.status).toBe(401);
      expect((error.error as { error: { type: string } }).error.type).toBe("authentication_error");
    }
    expect(upstream.bodies.length).toBe(calls);
    expect(await logLineOf(key.id, 401)).toMatchObject({ code: "ip_not_authorized", client_ip: "127.0.0.1" });
  });

  test("a change of its networks applies to the key's very next request (the cached caller is dropped), and is audited", async () => {
    const key = await keyFor(["10.0.0.0/8"]);
    const client = sluice.client({ apiKey: key.secret, maxRetries: 0 });
    const status = async () => (await refusal(() => client.chat.completions.create({ model: "m", messages }))).status;
    expect(await status()).toBe(401);
    await sluice.keys.setLists(key.id, { networks: ["127.0.0.1"] }, testActor);
    expect(await status()).toBe(0);
    await sluice.keys.setLists(key.id, { networks: ["::1"] }, testActor);
    expect(await status()).toBe(401);
    await sluice.keys.setLists(key.id, { networks: null }, testActor);
    expect(await status()).toBe(0);
    // The same networks again change nothing, and record nothing.
    await sluice.keys.setLists(key.id, { networks: null, models: null }, testActor);
    const entries = (await sluice.audit.list({ limit: 100 })).filter((entry) => entry.target === key.id);
    expect(entries.map((entry) => [entry.action, entry.changes?.networks])).toEqual([
      ["key.updated", [["::1"], null]],
      ["key.updated", [["127.0.0.1"], ["::1"]]],
      ["key.updated", [["10.0.0.0/8"], ["127.0.0.1"]]],
      ["key.created", [null, ["10.0.0.0/8"]]],
    ]);
  });

  test("a rotated key keeps its networks", async () => {
    const key = await keyFor(["10.0.0.0/8"]);
    const rotated = await sluice.keys.rotate(key.id, { graceMs: 0 }, testActor);
    expect(rotated.key.networks).toEqual(["10.0.0.0/8"]);
    const client = sluice.client({ apiKey: rotated.secret, maxRetries: 0 });
    expect((await refusal(() => client.chat.completions.create({ model: "m", messages }))).code).toBe("ip_not_authorized");
  });

  test("X-Forwarded-For from a peer that is not a trusted proxy is the caller's own word, and never read", async () => {
    const key = await keyFor(["203.0.113.0/24"]);
    const response = await sluice.post(
      "/v1/chat/completions",
      { model: "m", messages },
      { authorization: `Bearer ${key.secret}`, "x-forwarded-for": "203.0.113.9" },
    );
    expect(response.status).toBe(401);
    expect(((await response.json()) as { error: { message: string } }).error.message).toContain("127.0.0.1");
  });

  test("an organization's networks bind its keys that name none; a key's own replace them; a change applies at once and is audited", async () => {
    const organization = await sluice.organizations.create({ name: "bound co" }, testActor);
    const plain = (await sluice.keys.create({ organizationId: organization.id, name: "plain" }, testActor)).secret;
    const own = (await sluice.keys.create({ organizationId: organization.id, name: "own", networks: ["127.0.0.1"] }, testActor)).secret;
    const outcome = (secret: string) => refusal(() => sluice.client({ apiKey: secret, maxRetries: 0 }).chat.completions.create({ model: "m", messages }));
    expect([(await outcome(plain)).status, (await outcome(own)).status]).toEqual([0, 0]);
    await sluice.organizations.update("bound co", { networks: ["10.0.0.0/8"] }, testActor);
    expect(await outcome(plain)).toEqual({
      status: 401,
      code: "ip_not_authorized",
      message: "This API key cannot be used from the address 127.0.0.1: its organization's keys are bound to other networks.",
    });
    // The key's own list replaces the organization's: 127.0.0.1 is in it, though not in the organization's.
    expect((await outcome(own)).status).toBe(0);
    await sluice.organizations.update("bound co", { networks: ["127.0.0.0/8"] }, testActor);
    expect((await outcome(plain)).status).toBe(0);
    await sluice.organizations.update("bound co", { networks: null }, testActor);
    expect((await outcome(plain)).status).toBe(0);
    await expect(sluice.organizations.update("bound co", { networks: ["10.0.0.0/8", "nowhere"] }, testActor)).rejects.toThrow(NetworkListError);
    expect((await sluice.organizations.findByName("bound co"))?.networks).toBeNull();
    const entries = (await sluice.audit.list({ limit: 100, action: "organization.updated" })).filter((entry) => entry.target === "bound co");
    expect(entries.map((entry) => entry.changes?.networks)).toEqual([
      [["127.0.0.0/8"], null],
      [["10.0.0.0/8"], ["127.0.0.0/8"]],
      [null, ["10.0.0.0/8"]],
    ]);
  });

  test("the console API: an operator sets an organization's networks; a bad entry is 400 naming networks; its members see them and may not change them", async () => {
    await sluice.accounts.createUser({ email: "op@example.com", password: consolePassword, role: "operator", organizationId: null }, testActor);
    const operator = new ConsoleClient(sluice.url);
    await operator.signIn("op@example.com", consolePassword);
    const organization = await sluice.organizations.create({ name: "console bound co" }, testActor);
    const path = `/operator/organizations/${organization.id}`;
    expect(await operator.json("POST", path, { networks: ["203.0.113.0/24", "2001:db8::/32"] })).toMatchObject({
      status: 200,
      body: { networks: ["203.0.113.0/24", "2001:db8::/32"] },
    });
    const listed = (await operator.json<{ name: string; networks: string[] | null }[]>("GET", "/operator/organizations")).body;
    expect(listed.find((entry) => entry.name === "console bound co")?.networks).toEqual(["203.0.113.0/24", "2001:db8::/32"]);
    // A change of plan alone leaves them as they are.
    expect((await operator.json("POST", path, { plan: "default" })).body).toMatchObject({ networks: ["203.0.113.0/24", "2001:db8::/32"] });
    // Its members see them (their keys page says so), and may not change them.
    await sluice.accounts.createUser({ email: "bound@example.com", password: consolePassword, role: "member", organizationId: organization.id }, testActor);
    const member = new ConsoleClient(sluice.url);
    await member.signIn("bound@example.com", consolePassword);
    expect((await member.json("GET", "/me")).body).toMatchObject({ organization: { networks: ["203.0.113.0/24", "2001:db8::/32"] } });
    expect((await member.json("POST", path, { networks: null })).status).toBe(403);
    for (const networks of [["203.0.113.0/24", "a.b.c.d"], [], "203.0.113.0/24"]) {
      const wrong = await operator.json<{ error: { param: string } }>("POST", path, { networks });
      expect({ status: wrong.status, param: wrong.body.error.param }).toEqual({ status: 400, param: "networks" });
    }
    expect((await operator.json("POST", path, { networks: null })).body).toMatchObject({ networks: null });
  });

  test("the console API: networks set at creation and changed with the caps, listed; a bad entry is 400 naming networks; its members see them and may not change them", async () => {
    await sluice.accounts.createUser({ email: "member@example.com", password: consolePassword, role: "member", organizationId }, testActor);
    const member = new ConsoleClient(sluice.url);
    await member.signIn("member@example.com", consolePassword);
    const created = await member.json<{ key: { id: string; networks: string[] | null }; secret: string }>("POST", "/keys", {
      name: "office",
      networks: ["10.0.0.0/8"],
    });
    expect(created.status).toBe(201);
    expect(created.body.key.networks).toEqual(["10.0.0.0/8"]);
    const client = sluice.client({ apiKey: created.body.secret, maxRetries: 0 });
    expect((await refusal(() => client.chat.completions.create({ model: "m", messages }))).code).toBe("ip_not_authorized");
    const keyId = created.body.key.id;
    const updated = await member.json<{ networks: string[] | null }>("POST", `/keys/${keyId}/limits`, { networks: ["127.0.0.1", "::1"] });
    expect(updated).toMatchObject({ status: 200, body: { networks: ["127.0.0.1", "::1"] } });
    expect((await refusal(() => client.chat.completions.create({ model: "m", messages }))).status).toBe(0);
    // Caps changed without `networks` leave them as they are.
    expect((await member.json("POST", `/keys/${keyId}/limits`, { max_concurrency: 2 })).body).toMatchObject({ networks: ["127.0.0.1", "::1"] });
    const listed = await member.json<{ id: string; networks: string[] | null }[]>("GET", "/keys");
    expect(listed.body.find((key) => key.id === keyId)?.networks).toEqual(["127.0.0.1", "::1"]);
    for (const networks of [["10.0.0.0/33"], [], "10.0.0.0/8", Array.from({ length: 51 }, (_, index) => `10.${index}.0.0/16`)]) {
      const wrong = await member.json<{ error: { param: string; code: string } }>("POST", `/keys/${keyId}/limits`, { networks });
      expect(wrong.status).toBe(400);
      expect(wrong.body.error.param).toBe("networks");
    }
    expect((await member.json("POST", `/keys/${keyId}/limits`, { networks: null })).body).toMatchObject({ networks: null });
  });
});

test("sluice key create|update --networks and org create|update --networks (any for anywhere), listed last; a bad entry exits 2 naming it", async () => {
  await withCliOrganization(upstream.url, ["m"], (environment) => {
    const created = sluiceCommand(environment, "key", "create", "--org", "acme", "--networks", "10.0.0.0/8, 2001:db8::/32");
    expect(created.code).toBe(0);
    const listed = () => sluiceCommand(environment, "key", "list", "--org", "acme").stdout.trim().split("\t").at(-1);
    expect(listed()).toBe("10.0.0.0/8,2001:db8::/32");
    const keyId = created.stderr.match(/created key (key_[\w-]+)/)?.[1] as string;
    expect(sluiceCommand(environment, "key", "update", keyId, "--networks", "203.0.113.7").stdout.trim().split("\t").at(-1)).toBe("203.0.113.7");
    expect(sluiceCommand(environment, "key", "update", keyId, "--networks", "any").code).toBe(0);
    expect(listed()).toBe("any");
    const wrong = sluiceCommand(environment, "key", "update", keyId, "--networks", "10.0.0.0/40");
    expect(wrong.code).toBe(2);
    expect(wrong.stderr).toContain('"10.0.0.0/40" is not an IP address or CIDR range');
    expect(listed()).toBe("any");
    // An organization's: at creation and later, listed last.
    expect(sluiceCommand(environment, "org", "create", "bound", "--networks", "203.0.113.0/24").stdout.trim().split("\t").at(-1)).toBe("203.0.113.0/24");
    const organizations = () => sluiceCommand(environment, "org", "list").stdout.trim().split("\n");
    expect(organizations().map((line) => line.split("\t").at(-1))).toEqual(["any", "203.0.113.0/24"]);
    expect(sluiceCommand(environment, "org", "update", "bound", "--networks", "any").code).toBe(0);
    expect(organizations().map((line) => line.split("\t").at(-1))).toEqual(["any", "any"]);
    const refused = sluiceCommand(environment, "org", "update", "bound", "--networks", "203.0.113.0/24,somewhere");
    expect(refused.code).toBe(2);
    expect(refused.stderr).toContain('"somewhere" is not an IP address or CIDR range');
  });
});
