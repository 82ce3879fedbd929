import { type Cookie, Elysia } from "elysia";
import { SluiceError } from "../../errors";
import type { ClientAddresses } from "../../http/client-address";
import { bearerKey } from "../auth/index";
import { secretsEqual } from "../keys/secret";
import type { AccountService, Actor } from "./accounts";
import {
  AuditQuery,
  CreateKeyBody,
  CreateMemberBody,
  CreateOrganizationBody,
  CreateTokenBody,
  KeyLimitsBody,
  readConsoleBody,
  readConsoleQuery,
  RequestLogQuery,
  RotateKeyBody,
  SignInBody,
  SignUpBody,
  UsageReportQuery,
  UpdateOrganizationBody,
} from "./model";
import { consoleAssets } from "./page";
import { reportCsv } from "../usage/report";
import { requireSession, type ConsoleService } from "./service";
import { flowLifetimeSeconds, SsoError } from "./sso";
import { consoleNetworkCheck } from "./console-networks";

const sessionCookie = "sluice_session";
const flowCookie = "sluice_sso";
const flowCookiePath = "/console/api/sso";

function isHttps(request: Request): boolean {
  return new URL(request.url).protocol === "https:" || request.headers.get("x-forwarded-proto") === "https";
}

/** The session cookie's attributes: HttpOnly, SameSite=Strict, a week, Secure behind HTTPS. */
function sessionCookieOf(token: string, request: Request) {
  return { value: token, httpOnly: true, sameSite: "strict" as const, path: "/", maxAge: 7 * 24 * 3600, secure: isHttps(request) };
}

/** What a handler's `set` needs to redirect: the answer then carries the cookies it set too. */
interface Redirecting {
  status?: number | string;
  headers: Record<string, string | number | undefined> | Record<string, string>;
}

function redirectTo(set: Redirecting, location: string): string {
  set.status = 302;
  (set.headers as Record<string, string>).location = location;
  return "";
}

/** The cookie that tells the sign-in page why single sign-on did not let the browser in (read once, by `/sign-up`). */
const signInErrorCookie = "sluice_sign_in_error";

/**
 * Back to the console's sign-in page, which shows why single sign-on did not let the browser in. The reason goes in a
 * short-lived cookie rather than the address, so that a link from elsewhere cannot put words of its own on the page.
 */
function signInPageWith(set: Redirecting, cookie: Record<string, Cookie<unknown>>, request: Request, reason: string): string {
  cookie[signInErrorCookie]?.set({ value: reason, httpOnly: true, sameSite: "lax", path: "/console/api", maxAge: 60, secure: isHttps(request) });
  return redirectTo(set, "/");
}

/**
 * Sent with every response but the answer routes' (which build their own): the console's pages load scripts and
 * styles from their own origin only and may not be framed; nothing is sniffed, no referrer leaves.
 */
export const securityHeaders: Readonly<Record<string, string>> = {
  "content-security-policy":
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'",
  "x-content-type-options": "nosniff",
  "referrer-policy": "no-referrer",
};

/**
 * The web console's JSON API under `/console/api` (its pages are served at `/` by the app, see consolePage). Sessions are an HttpOnly,
 * SameSite=Strict cookie; every change also needs the session's CSRF token in `x-csrf-token`. Scripts use a console
 * token instead (`Authorization: Bearer sluice-console-…`), which acts as its account.
 */
export const consoleRoutes = (service: ConsoleService, accounts: AccountService, addresses: ClientAddresses) => {
  const fromConsoleNetworks = consoleNetworkCheck(() => service.consoleNetworks(), addresses);
  return new Elysia({ name: "console" }).group("/console/api", (api) =>
    api
      // First of all, before any session, token or password is looked at. A transform hook, which runs before the
      // resolve below: a beforeHandle hook here would share its queue, and Elysia then ran the resolve for the routes
      // above it too (sign-up and sign-in asked for a session).
      .onTransform(({ request, server }) => fromConsoleNetworks(request, server))
      .get("/sign-up", ({ cookie, request }) => {
        // The reason single sign-on just sent the browser back without a session, told to the page once.
        const error = cookie[signInErrorCookie]?.value as string | undefined;
        if (!error) return service.signUpSetting();
        cookie[signInErrorCookie]?.set({ value: "", httpOnly: true, sameSite: "lax", path: "/console/api", maxAge: 0, secure: isHttps(request) });
        return { ...service.signUpSetting(), error };
      })
      .post("/signup", async ({ request, server, set }) => {
        await service.signUp(await readConsoleBody(request, SignUpBody), addresses.of(request, server));
        set.status = 201;
        return { ok: true };
      })
      .post("/signin", async ({ request, server, cookie }) => {
        service.requirePasswords();
        const body = await readConsoleBody(request, SignInBody);
        // Failures through a proxy nobody named are not held against its address, which its every caller shares.
        const { address, throughUnnamedProxy } = addresses.origin(request, server);
        const { token, actor } = await accounts.signIn(body.email, body.password, { address, counted: throughUnnamedProxy ? undefined : address });
        cookie[sessionCookie]?.set(sessionCookieOf(token, request));
        return service.me(actor);
      })
      // Single sign-on: off to the identity provider, with the flow's secrets in a cookie of their own (SameSite=Lax,
      // since the provider sends the browser back from another site), then back to the console signed in, or to its
      // sign-in page with the reason.
      .get("/sso/start", async ({ cookie, request, set }) => {
        const sso = service.singleSignOn();
        if (!sso) throw new SluiceError("not_found", "Single sign-on is not set up on this console ([console.sso]).");
        try {
          const { location, flow } = await sso.start();
          cookie[flowCookie]?.set({
            value: flow,
            httpOnly: true,
            sameSite: "lax",
            path: flowCookiePath,
            maxAge: flowLifetimeSeconds,
            secure: isHttps(request),
          });
          return redirectTo(set, location);
        } catch (error) {
          if (error instanceof SsoError) return signInPageWith(set, cookie, request, error.message);
          throw error;
        }
      })
      .get("/sso/callback", async ({ cookie, request, server, set }) => {
        const sso = service.singleSignOn();
        if (!sso) throw new SluiceError("not_found", "Single sign-on is not set up on this console ([console.sso]).");
        const flow = cookie[flowCookie]?.value as string | undefined;
        // Spent whatever happens: a flow is finished once.
        cookie[flowCookie]?.set({ value: "", httpOnly: true, sameSite: "lax", path: flowCookiePath, maxAge: 0, secure: isHttps(request) });
        const address = addresses.of(request, server);
        try {
          const email = await sso.finish(new URL(request.url).searchParams, flow);
          const { token } = await service.signInVerified(email, address);
          cookie[sessionCookie]?.set(sessionCookieOf(token, request));
          return redirectTo(set, "/");
        } catch (error) {
          if (error instanceof SsoError) {
            await accounts.ssoRefused(error.message, address);
            return signInPageWith(set, cookie, request, error.message);
          }
          if (error instanceof SluiceError) return signInPageWith(set, cookie, request, error.message);
          throw error;
        }
      })
      .resolve(async ({ cookie, request, server }) => {
        // A console token (scripts, provisioning) rather than a session: no cookie, so no CSRF token either.
        const token = bearerKey(request);
        if (token !== undefined) {
          const actor = await accounts.tokens.actorOf(token);
          if (!actor) throw new SluiceError("not_signed_in", "This console token is not valid: revoked, expired or mistyped.");
          return { actor: { ...actor, address: addresses.of(request, server) } };
        }
        const actor = await accounts.actorOf(cookie[sessionCookie]?.value as string | undefined);
        if (!actor) throw new SluiceError("not_signed_in", "Sign in first.");
        if (request.method !== "GET" && !secretsEqual(request.headers.get("x-csrf-token") ?? "", actor.csrfToken)) {
          throw new SluiceError("csrf_token_invalid", "Missing or wrong CSRF token; reload the page.");
        }
        return { actor: { ...actor, address: addresses.of(request, server) } as Actor };
      })
      .post("/signout", async ({ actor, cookie }) => {
        requireSession(actor);
        await accounts.signOut(cookie[sessionCookie]?.value as string);
        cookie[sessionCookie]?.remove();
        return { ok: true };
      })
      .get("/me", ({ actor }) => service.me(actor))
      .get("/plans", () => service.plans())
      .get("/keys", ({ actor }) => service.listKeys(actor))
      .post("/keys", async ({ actor, request, set }) => {
        const body = await readConsoleBody(request, CreateKeyBody);
        set.status = 201;
        return service.createKey(actor, body);
      })
      .post("/keys/:id/revoke", ({ actor, params }) => service.revokeKey(actor, params.id))
      .post("/keys/:id/rotate", async ({ actor, params, request, set }) => {
        const body = await readConsoleBody(request, RotateKeyBody);
        set.status = 201;
        return service.rotateKey(actor, params.id, body);
      })
      .post("/keys/:id/limits", async ({ actor, params, request }) => service.setKeyLimits(actor, params.id, await readConsoleBody(request, KeyLimitsBody)))
      .get("/usage", ({ actor }) => service.usage(actor))
      .get("/usage-report", ({ actor, query }) => service.usageReport(actor, readConsoleQuery(query, UsageReportQuery)))
      .get("/usage-report.csv", async ({ actor, query }) => {
        const report = await service.usageReport(actor, readConsoleQuery(query, UsageReportQuery));
        return new Response(reportCsv(report), {
          headers: { "content-type": "text/csv; charset=utf-8", "content-disposition": 'attachment; filename="sluice-usage-report.csv"' },
        });
      })
      .get("/tokens", ({ actor }) => service.listTokens(actor))
      .post("/tokens", async ({ actor, request, set }) => {
        const body = await readConsoleBody(request, CreateTokenBody);
        set.status = 201;
        return service.createToken(actor, body);
      })
      .post("/tokens/:id/revoke", ({ actor, params }) => service.revokeToken(actor, params.id))
      .get("/requests", ({ actor, query }) => service.requests(actor, readConsoleQuery(query, RequestLogQuery)))
      .get("/requests.csv", async ({ actor, query }) => {
        const rows = await service.requestsCsv(actor, readConsoleQuery(query, RequestLogQuery));
        return new Response(rows.pipeThrough(new TextEncoderStream()), {
          headers: { "content-type": "text/csv; charset=utf-8", "content-disposition": 'attachment; filename="sluice-requests.csv"' },
        });
      })
      .get("/operator/audit", ({ actor, query }) => service.auditTrail(actor, readConsoleQuery(query, AuditQuery)))
      .get("/operator/organizations", ({ actor }) => service.listOrganizations(actor))
      .post("/operator/organizations", async ({ actor, request, set }) => {
        const body = await readConsoleBody(request, CreateOrganizationBody);
        set.status = 201;
        return service.createOrganization(actor, body);
      })
      .get("/operator/organizations/:id/keys", ({ actor, params }) => service.listKeys(actor, params.id))
      .post("/operator/organizations/:id/keys", async ({ actor, params, request, set }) => {
        const body = await readConsoleBody(request, CreateKeyBody);
        set.status = 201;
        return service.createKey(actor, body, params.id);
      })
      .get("/operator/organizations/:id/usage", ({ actor, params }) => service.usage(actor, params.id))
      .post("/operator/organizations/:id/members", async ({ actor, params, request, set }) => {
        const body = await readConsoleBody(request, CreateMemberBody);
        set.status = 201;
        return service.createMember(actor, params.id, body);
      })
      .post("/operator/organizations/:id", async ({ actor, params, request }) => {
        return service.updateOrganization(actor, params.id, await readConsoleBody(request, UpdateOrganizationBody));
      })
      .get("/operator/models", ({ actor }) => service.listModels(actor)),
  );
};

/** The console's page and its bundle's files, at `/` and `/<file>`. */
export const consolePageRoutes = (service: ConsoleService, addresses: ClientAddresses) => {
  const fromConsoleNetworks = consoleNetworkCheck(() => service.consoleNetworks(), addresses);
  return new Elysia({ name: "console-page" })
    .onTransform(({ request, server }) => fromConsoleNetworks(request, server))
    .get("/", () => assetResponse("/"))
    .get("/:file", ({ params }) => assetResponse(`/${params.file}`));
};

async function assetResponse(path: string): Promise<Response> {
  const asset = (await consoleAssets()).get(path);
  if (!asset) throw new SluiceError("not_found", `Unknown route: GET ${path}.`);
  // The page itself is never cached, so that a new version's bundle (its files have hashed names) is picked up.
  const caching = path === "/" ? "no-cache" : "public, max-age=31536000, immutable";
  return new Response(asset.body, { headers: { "content-type": asset.contentType, "cache-control": caching } });
}
