// `[console] sign_up = false`: nobody signs up; operators make the accounts (the console API, its page, the CLI);
// a reload opens or closes sign-up from the next request.
import { afterAll, beforeAll, expect, test } from "bun:test";
import { resolveConfig } from "../../../src/config/load";
import type { ConfigFile } from "../../../src/config/schema";
import { fakeModel, startSluice, testActor, useFakeUpstream, type TestSluice } from "../../helpers";
import { sluiceCommand, sluiceEnvironment } from "../../support/sluice-process";
import { ConsoleClient, consolePassword as password } from "./console-client";

const upstream = useFakeUpstream();
let sluice: TestSluice;
let operator: ConsoleClient;
const configFile = (signUp: boolean): ConfigFile => ({
  models: [fakeModel(upstream.url, "m", "usage-10-5")],
  plans: [{ id: "default", models: ["*"] }],
  console: { sign_up: signUp },
});

beforeAll(async () => {
  sluice = await startSluice(configFile(false));
  await sluice.accounts.createUser({ email: "op@example.com", password, role: "operator", organizationId: null }, testActor);
  operator = new ConsoleClient(sluice.url);
  await operator.signIn("op@example.com", password);
});
afterAll(() => sluice.stop());

test("closed: sign-up is 403 and creates nothing; the page is told so", async () => {
  const visitor = new ConsoleClient(sluice.url);
  expect((await visitor.json("GET", "/sign-up")).body).toEqual({ open: false, sso: null, passwords: true });
  const refused = await visitor.json<{ error: { code: string; message: string } }>("POST", "/signup", {
    email: "new@example.com",
    password,
    organization: "Uninvited Co",
  });
  expect(refused.status).toBe(403);
  expect(refused.body.error).toMatchObject({ code: "forbidden", message: "Sign-up is closed here: ask an operator for an account." });
  expect(await sluice.organizations.findByName("Uninvited Co")).toBeUndefined();
  expect(await sluice.accounts.findByEmail("new@example.com")).toBeUndefined();
});

test("an operator adds a member to an organization, who signs in to it; a member cannot add one; bad input is 400", async () => {
  const organization = (await operator.json<{ id: string }>("POST", "/operator/organizations", { name: "Invited Co" })).body;
  const added = await operator.json<{ email: string; role: string; organizationId: string }>("POST", `/operator/organizations/${organization.id}/members`, {
    email: "Member@Example.com",
    password,
  });
  expect(added.status).toBe(201);
  expect(added.body).toEqual({ email: "member@example.com", role: "member", organizationId: organization.id });
  const member = new ConsoleClient(sluice.url);
  await member.signIn("member@example.com", password);
  expect((await member.json<{ organization: { name: string } }>("GET", "/me")).body.organization.name).toBe("Invited Co");
  expect((await member.json("POST", `/operator/organizations/${organization.id}/members`, { email: "friend@example.com", password })).status).toBe(403);

  const cases: [unknown, string][] = [
    [{ email: "not an email", password }, "email"],
    [{ email: "short@example.com", password: "short" }, "password"],
    [{ email: "member@example.com", password }, "email"],
  ];
  for (const [body, param] of cases) {
    const response = await operator.json<{ error: { param: string } }>("POST", `/operator/organizations/${organization.id}/members`, body);
    expect({ status: response.status, param: response.body.error.param }).toEqual({ status: 400, param });
  }
  expect((await operator.json("POST", "/operator/organizations/org_nothing/members", { email: "x@example.com", password })).status).toBe(404);
  const trail = await sluice.audit.list({ action: "account.created", organizationId: organization.id, limit: 5 });
  expect(trail.map((entry) => [entry.target, entry.actor])).toEqual([["member@example.com", "op@example.com"]]);
});

test("a reload opens sign-up from the next request, and closes it again; the audit trail records both", async () => {
  const changes = await sluice.server.reconfigure(resolveConfig(configFile(true)), { kind: "server", name: "test" });
  expect(changes.console).toBe(true);
  const visitor = new ConsoleClient(sluice.url);
  expect((await visitor.json("GET", "/sign-up")).body).toEqual({ open: true, sso: null, passwords: true });
  expect((await visitor.json("POST", "/signup", { email: "early@example.com", password, organization: "Early Co" })).status).toBe(201);
  await sluice.server.reconfigure(resolveConfig(configFile(false)), { kind: "server", name: "test" });
  expect((await visitor.json("POST", "/signup", { email: "late@example.com", password, organization: "Late Co" })).status).toBe(403);
  const reloads = await sluice.audit.list({ action: "config.reloaded", limit: 5 });
  expect(reloads.map((entry) => entry.changes?.["console.signUp"])).toEqual([
    [true, false],
    [false, true],
  ]);
});

test("sluice member create: a member of the organization named, its password from SLUICE_MEMBER_PASSWORD; mistakes exit 2", () => {
  const environment = sluiceEnvironment(sluice.database.sqlite.filename, "");
  delete environment.SLUICE_CONFIG;
  const created = sluiceCommand({ ...environment, SLUICE_MEMBER_PASSWORD: password }, "member", "create", "cli@example.com", "--org", "acme");
  expect(created.code).toBe(0);
  expect(created.stdout).toMatch(/^usr_\S+\tcli@example\.com\tmember\tacme\n$/);
  const missingOrg = sluiceCommand({ ...environment, SLUICE_MEMBER_PASSWORD: password }, "member", "create", "x@example.com");
  expect([missingOrg.code, missingOrg.stderr.split("\n")[0]]).toEqual([2, "sluice: --org NAME is required"]);
  const unknownOrg = sluiceCommand({ ...environment, SLUICE_MEMBER_PASSWORD: password }, "member", "create", "x@example.com", "--org", "ghost");
  expect([unknownOrg.code, unknownOrg.stderr.trim()]).toEqual([2, 'sluice: no organization named "ghost"']);
  const shortPassword = sluiceCommand({ ...environment, SLUICE_MEMBER_PASSWORD: "short" }, "member", "create", "y@example.com", "--org", "acme");
  expect(shortPassword.code).toBe(2);
});
