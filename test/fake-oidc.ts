// A fake OpenID Connect provider (a test fixture): discovery, a JWKS with one RSA key, an authorization endpoint that
// signs in `user` at once and sends the browser back with a code, and a token endpoint that checks the client's
// secret, the redirect and the PKCE verifier before it returns an ID token signed for the code's nonce. `mode` makes
// the token wrong in the ways a test needs.
import { createHash } from "node:crypto";

export type TokenMode =
  | "ok"
  | "bad-signature"
  | "other-audience"
  | "other-issuer"
  | "expired"
  | "other-nonce"
  | "unknown-key"
  | "none-algorithm"
  /** Says ES256 but names the RSA key: a token that picks a key of another kind. */
  | "es256-with-rsa-key";

export interface FakeOidc {
  /** The issuer: discovery is at `${issuer}/.well-known/openid-configuration`. */
  issuer: string;
  clientId: string;
  clientSecret: string;
  /** Who the next authorization signs in. */
  user: { email: string; emailVerified?: boolean };
  mode: TokenMode;
  /** How tokens are signed: with the RSA key (`key-1`) or the P-256 key (`ec-1`); both are published. */
  algorithm: "RS256" | "ES256";
  /**
   * Whether the authorization shows a page with a "Continue" link back to the console, as a real provider's sign-in
   * page does, so that the browser's way back is a navigation from the provider's site (false: a redirect at once).
   */
  consentPage: boolean;
  /** How many times its discovery document was fetched. */
  discoveries: number;
  /** The query of every authorization request, and the form of every token request. */
  authorizations: URLSearchParams[];
  tokenRequests: { form: URLSearchParams; authorization: string | null }[];
  stop(): Promise<void>;
}

function base64url(bytes: ArrayBuffer | Uint8Array | string): string {
  return Buffer.from(typeof bytes === "string" ? bytes : new Uint8Array(bytes)).toString("base64url");
}

/** `host`: the issuer's host name (`localhost` makes it another site than a console at 127.0.0.1, for a browser). */
export async function startFakeOidc(host = "127.0.0.1"): Promise<FakeOidc> {
  const keys = (await crypto.subtle.generateKey(
    { name: "RSASSA-PKCS1-v1_5", modulusLength: 2048, publicExponent: new Uint8Array([1, 0, 1]), hash: "SHA-256" },
    true,
    ["sign", "verify"],
  )) as CryptoKeyPair;
  const other = (await crypto.subtle.generateKey(
    { name: "RSASSA-PKCS1-v1_5", modulusLength: 2048, publicExponent: new Uint8Array([1, 0, 1]), hash: "SHA-256" },
    true,
    ["sign", "verify"],
  )) as CryptoKeyPair;
  const publicJwk = { ...(await crypto.subtle.exportKey("jwk", keys.publicKey)), kid: "key-1", use: "sig", alg: "RS256" };
  const curve = (await crypto.subtle.generateKey({ name: "ECDSA", namedCurve: "P-256" }, true, ["sign", "verify"])) as CryptoKeyPair;
  const otherCurve = (await crypto.subtle.generateKey({ name: "ECDSA", namedCurve: "P-256" }, true, ["sign", "verify"])) as CryptoKeyPair;
  const curveJwk = { ...(await crypto.subtle.exportKey("jwk", curve.publicKey)), kid: "ec-1", use: "sig", alg: "ES256" };
  /** code → what the token endpoint needs to answer it. */
  const codes = new Map<string, { nonce: string; challenge: string; redirectUri: string; user: FakeOidc["user"] }>();
  const state: FakeOidc = {
    issuer: "",
    clientId: "sluice-console",
    clientSecret: "fake client secret",
    user: { email: "someone@example.com", emailVerified: true },
    mode: "ok",
    algorithm: "RS256",
    consentPage: false,
    discoveries: 0,
    authorizations: [],
    tokenRequests: [],
    stop: async () => {},
  };

  async function idToken(claims: Record<string, unknown>): Promise<string> {
    const mode = state.mode;
    if (state.algorithm === "ES256" || mode === "es256-with-rsa-key") {
      const header = { alg: "ES256", kid: mode === "es256-with-rsa-key" ? "key-1" : "ec-1", typ: "JWT" };
      const input = `${base64url(JSON.stringify(header))}.${base64url(JSON.stringify(claims))}`;
      const signer = mode === "bad-signature" ? otherCurve.privateKey : curve.privateKey;
      const signature = await crypto.subtle.sign({ name: "ECDSA", hash: "SHA-256" }, signer, new TextEncoder().encode(input));
      return `${input}.${base64url(signature)}`;
    }
    const header = { alg: mode === "none-algorithm" ? "none" : "RS256", kid: mode === "unknown-key" ? "key-2" : "key-1", typ: "JWT" };
    const input = `${base64url(JSON.stringify(header))}.${base64url(JSON.stringify(claims))}`;
    if (mode === "none-algorithm") return `${input}.`;
    const signer = mode === "bad-signature" || mode === "unknown-key" ? other.privateKey : keys.privateKey;
    const signature = await crypto.subtle.sign("RSASSA-PKCS1-v1_5", signer, new TextEncoder().encode(input));
    return `${input}.${base64url(signature)}`;
  }

  const server = Bun.serve({
    port: 0,
    async fetch(request) {
      const url = new URL(request.url);
      switch (url.pathname) {
        case "/.well-known/openid-configuration":
          state.discoveries++;
          return Response.json({
            issuer: state.issuer,
            authorization_endpoint: `${state.issuer}/authorize`,
            token_endpoint: `${state.issuer}/token`,
            jwks_uri: `${state.issuer}/jwks`,
            response_types_supported: ["code"],
            id_token_signing_alg_values_supported: ["RS256", "ES256"],
          });
        case "/jwks":
          return Response.json({ keys: [publicJwk, curveJwk] });
        case "/authorize": {
          state.authorizations.push(url.searchParams);
          const code = crypto.randomUUID();
          codes.set(code, {
            nonce: url.searchParams.get("nonce") ?? "",
            challenge: url.searchParams.get("code_challenge") ?? "",
            redirectUri: url.searchParams.get("redirect_uri") ?? "",
            user: { ...state.user },
          });
          const back = new URL(url.searchParams.get("redirect_uri") as string);
          back.searchParams.set("code", code);
          back.searchParams.set("state", url.searchParams.get("state") ?? "");
          if (!state.consentPage) return new Response(null, { status: 302, headers: { location: back.toString() } });
          const page = `<!doctype html><title>Acme ID</title><a id="continue" href="${Bun.escapeHTML(back.toString())}">Continue as ${Bun.escapeHTML(state.user.email)}</a>`;
          return new Response(page, { headers: { "content-type": "text/html; charset=utf-8" } });
        }
        case "/token": {
          const form = new URLSearchParams(await request.text());
          const authorization = request.headers.get("authorization");
          state.tokenRequests.push({ form, authorization });
          const expected = `Basic ${Buffer.from(`${encodeURIComponent(state.clientId)}:${encodeURIComponent(state.clientSecret)}`).toString("base64")}`;
          if (authorization !== expected) return Response.json({ error: "invalid_client" }, { status: 401 });
          const granted = codes.get(form.get("code") ?? "");
          codes.delete(form.get("code") ?? "");
          const verifier = form.get("code_verifier") ?? "";
          if (
            !granted ||
            form.get("grant_type") !== "authorization_code" ||
            form.get("redirect_uri") !== granted.redirectUri ||
            createHash("sha256").update(verifier).digest("base64url") !== granted.challenge
          ) {
            return Response.json({ error: "invalid_grant" }, { status: 400 });
          }
          const now = Math.floor(Date.now() / 1000);
          const claims: Record<string, unknown> = {
            iss: state.mode === "other-issuer" ? "https://elsewhere.example" : state.issuer,
            sub: `user-${granted.user.email}`,
            aud: state.mode === "other-audience" ? "another-client" : state.clientId,
            iat: now,
            exp: state.mode === "expired" ? now - 600 : now + 300,
            nonce: state.mode === "other-nonce" ? "not the nonce" : granted.nonce,
            email: granted.user.email,
          };
          if (granted.user.emailVerified !== undefined) claims.email_verified = granted.user.emailVerified;
          return Response.json({ access_token: "fake-access-token", token_type: "Bearer", expires_in: 300, id_token: await idToken(claims) });
        }
      }
      return new Response("not found", { status: 404 });
    },
  });
  state.issuer = `http://${host}:${server.port}`;
  state.stop = async () => {
    await server.stop(true);
  };
  return state;
}
