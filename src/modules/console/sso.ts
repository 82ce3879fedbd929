// Console sign-in through the company's identity provider (OpenID Connect: Okta, Entra ID, Google Workspace, Keycloak,
// Authentik, Dex, ...): the authorization code flow with PKCE, a state and a nonce, the ID token's RS256 or ES256 signature
// checked against the provider's published keys (WebCrypto; no dependency). It tells who signed in, by a verified email;
// which console account that is, and what it may do, stays the console's own business (see the routes).
import { readSecret } from "../../config/secrets";
import type { SsoConfig } from "../../config/schema";

/** `[console.sso]` with every default filled in, and where its client secret is read from. */
export interface SsoSettings {
  issuer: string;
  clientId: string;
  /** Read at each sign-in, so that a secret rotated in its file applies at once; may throw, naming what is wrong. */
  clientSecret: () => string | undefined;
  /** The console's callback as the provider knows it: `https://sluice.example.com/console/api/sso/callback`. */
  redirectUrl: string;
  /** Lower case; empty: any domain the provider vouches for. */
  allowedDomains: string[];
  label: string;
  /** false: the console's passwords are off, and this is the only way in (besides console tokens). */
  passwords: boolean;
  /** The organization (by name) a verified email without an account joins as a member; undefined: refused. */
  organization: string | undefined;
}

/** A sign-in through the provider that did not work, with the reason a person can act on. */
export class SsoError extends Error {
  override name = "SsoError";
}

interface Discovery {
  authorization_endpoint: string;
  token_endpoint: string;
  jwks_uri: string;
}

/** The fields of a published key (RFC 7517) that are read here: RSA's n and e, or an elliptic curve's crv, x and y. */
interface Jwk {
  kty?: string;
  kid?: string;
  use?: string;
  n?: string;
  e?: string;
  crv?: string;
  x?: string;
  y?: string;
}

/**
 * The ID token signatures taken (RFC 7518): RS256, every provider's default, and ES256 (Apple's, and an option at
 * Auth0, Okta and Keycloak). Each names the key type it must be verified with, so a token cannot pick a key of
 * another kind; anything else, `none` included, is refused.
 */
const signatures = {
  RS256: {
    kty: "RSA",
    key: (jwk: Jwk): JsonWebKeyFields => ({ kty: "RSA", n: jwk.n, e: jwk.e }),
    importAs: { name: "RSASSA-PKCS1-v1_5", hash: "SHA-256" },
    verifyAs: { name: "RSASSA-PKCS1-v1_5" },
  },
  ES256: {
    kty: "EC",
    key: (jwk: Jwk): JsonWebKeyFields => ({ kty: "EC", crv: jwk.crv, x: jwk.x, y: jwk.y }),
    importAs: { name: "ECDSA", namedCurve: "P-256" },
    verifyAs: { name: "ECDSA", hash: "SHA-256" },
  },
} as const;

/** What `crypto.subtle.importKey` takes as a JWK, of the fields above. */
type JsonWebKeyFields = Pick<Jwk, "kty" | "n" | "e" | "crv" | "x" | "y">;

/** How long the browser has between leaving for the provider and coming back (the flow cookie's lifetime). */
export const flowLifetimeSeconds = 600;
/** Clocks of the provider and of Sluice may differ by this much. */
const clockSkewMs = 60_000;
/** A provider that does not answer in this long is reported, rather than holding the browser. */
const providerTimeoutMs = 10_000;
/** Keys are fetched again for a token signed with an unknown key (a rotation), at most this often. */
const keysRefetchMs = 60_000;

function random(bytes: number): string {
  return Buffer.from(crypto.getRandomValues(new Uint8Array(bytes))).toString("base64url");
}

async function providerJson<T>(url: string, init: RequestInit = {}): Promise<T> {
  let response: Response;
  try {
    response = await fetch(url, { ...init, signal: AbortSignal.timeout(providerTimeoutMs), redirect: "error" });
  } catch (error) {
    throw new SsoError(`the identity provider did not answer (${url}: ${(error as Error).message})`);
  }
  const text = await response.text();
  if (!response.ok) throw new SsoError(`the identity provider answered ${response.status} at ${url}: ${text.slice(0, 200)}`);
  try {
    return JSON.parse(text) as T;
  } catch {
    throw new SsoError(`the identity provider's answer at ${url} is not JSON`);
  }
}

function decodePart<T>(part: string | undefined, what: string): T {
  try {
    return JSON.parse(Buffer.from(part ?? "", "base64url").toString("utf8")) as T;
  } catch {
    throw new SsoError(`the ID token's ${what} is not JSON`);
  }
}

/**
 * One identity provider. `start` sends the browser there; `finish` takes it back, exchanges the code and returns the
 * email the provider vouches for. The flow's secrets (state, nonce, PKCE verifier) travel in a cookie of their own,
 * so that any instance can finish what another started.
 */
export class SingleSignOn {
  private discovery: Promise<Discovery> | undefined;
  private keys: Jwk[] = [];
  private keysFetchedAt = 0;

  constructor(readonly settings: SsoSettings) {}

  /** Where to send the browser, and the flow cookie's value to set beside it. */
  async start(): Promise<{ location: string; flow: string }> {
    const discovery = await this.discover();
    const state = random(24);
    const nonce = random(24);
    const verifier = random(48);
    const location = new URL(discovery.authorization_endpoint);
    const parameters = {
      response_type: "code",
      client_id: this.settings.clientId,
      redirect_uri: this.settings.redirectUrl,
      scope: "openid email",
      state,
      nonce,
      code_challenge: Bun.SHA256.hash(verifier, "base64url"),
      code_challenge_method: "S256",
    };
    for (const [name, value] of Object.entries(parameters)) location.searchParams.set(name, value);
    return { location: location.toString(), flow: `${state}.${nonce}.${verifier}` };
  }

  /** The provider's answer (the callback's query) checked against the flow cookie; returns the verified email. */
  async finish(query: URLSearchParams, flow: string | undefined, now = Date.now()): Promise<string> {
    const refused = query.get("error");
    if (refused)
      throw new SsoError(
        `the identity provider refused the sign-in: ${refused}${query.get("error_description") ? ` (${query.get("error_description")})` : ""}`,
      );
    const [state, nonce, verifier] = (flow ?? "").split(".");
    if (!state || !nonce || !verifier) throw new SsoError("the sign-in took too long or began in another browser: start it again");
    if (query.get("state") !== state) throw new SsoError("the sign-in's state does not match: start it again");
    const code = query.get("code");
    if (!code) throw new SsoError("the identity provider sent no code");
    const discovery = await this.discover();
    let secret: string | undefined;
    try {
      secret = this.settings.clientSecret();
    } catch (error) {
      throw new SsoError((error as Error).message);
    }
    if (!secret) throw new SsoError("the console's client secret is not set (console.sso.client_secret_env or client_secret_file)");
    const credentials = `${encodeURIComponent(this.settings.clientId)}:${encodeURIComponent(secret)}`;
    const tokens = await providerJson<{ id_token?: unknown }>(discovery.token_endpoint, {
      method: "POST",
      headers: { "content-type": "application/x-www-form-urlencoded", authorization: `Basic ${Buffer.from(credentials).toString("base64")}` },
      body: new URLSearchParams({ grant_type: "authorization_code", code, redirect_uri: this.settings.redirectUrl, code_verifier: verifier }),
    });
    if (typeof tokens.id_token !== "string") throw new SsoError("the identity provider sent no ID token");
    const claims = await this.verify(tokens.id_token, discovery, now);
    return this.emailOf(claims, nonce, now);
  }

  private discover(): Promise<Discovery> {
    this.discovery ??= providerJson<Discovery>(`${this.settings.issuer.replace(/\/+$/, "")}/.well-known/openid-configuration`).then((found) => {
      for (const field of ["authorization_endpoint", "token_endpoint", "jwks_uri"] as const) {
        if (typeof found[field] !== "string") throw new SsoError(`the identity provider's discovery document has no ${field}`);
      }
      return found;
    });
    // A provider down at the first sign-in is asked again at the next.
    this.discovery.catch(() => {
      this.discovery = undefined;
    });
    return this.discovery;
  }

  /** The token's claims, once its signature is the provider's: RS256 or ES256 with one of its published keys. */
  private async verify(token: string, discovery: Discovery, now: number): Promise<Record<string, unknown>> {
    const parts = token.split(".");
    if (parts.length !== 3) throw new SsoError("the ID token is not a signed JWT");
    const header = decodePart<{ alg?: unknown; kid?: unknown }>(parts[0], "header");
    const algorithm = header.alg === "RS256" || header.alg === "ES256" ? signatures[header.alg] : undefined;
    if (!algorithm) throw new SsoError(`the ID token is signed with ${String(header.alg)}; RS256 or ES256 is expected`);
    const kid = typeof header.kid === "string" ? header.kid : undefined;
    let jwk = this.keyFor(kid, algorithm.kty);
    if (!jwk && now - this.keysFetchedAt >= keysRefetchMs) {
      this.keys = (await providerJson<{ keys?: Jwk[] }>(discovery.jwks_uri)).keys ?? [];
      this.keysFetchedAt = now;
      jwk = this.keyFor(kid, algorithm.kty);
    }
    if (!jwk) throw new SsoError("the ID token is signed with a key the identity provider does not publish");
    let key: CryptoKey;
    try {
      key = await crypto.subtle.importKey("jwk", algorithm.key(jwk), algorithm.importAs, false, ["verify"]);
    } catch {
      throw new SsoError("the identity provider publishes a key that cannot be read");
    }
    const signature = Buffer.from(parts[2] as string, "base64url");
    const signed = new TextEncoder().encode(`${parts[0]}.${parts[1]}`);
    if (!(await crypto.subtle.verify(algorithm.verifyAs, key, signature, signed)))
      throw new SsoError("the ID token's signature is not the identity provider's");
    return decodePart<Record<string, unknown>>(parts[1], "payload");
  }

  /** The published signing key of this id and type; without an id, the only one of the type. */
  private keyFor(kid: string | undefined, kty: string): Jwk | undefined {
    const candidates = this.keys.filter((key) => key.kty === kty && (key.use === undefined || key.use === "sig"));
    return kid === undefined ? (candidates.length === 1 ? candidates[0] : undefined) : candidates.find((key) => key.kid === kid);
  }

  /** The checks of OpenID Connect Core 3.1.3.7 that apply here, then the email and its domain. */
  private emailOf(claims: Record<string, unknown>, nonce: string, now: number): string {
    const issuer = this.settings.issuer.replace(/\/+$/, "");
    if (typeof claims.iss !== "string" || claims.iss.replace(/\/+$/, "") !== issuer)
      throw new SsoError(`the ID token was issued by ${String(claims.iss)}, not ${issuer}`);
    const audiences = Array.isArray(claims.aud) ? claims.aud : [claims.aud];
    if (!audiences.includes(this.settings.clientId)) throw new SsoError("the ID token is for another client");
    if (audiences.length > 1 && claims.azp !== undefined && claims.azp !== this.settings.clientId)
      throw new SsoError("the ID token was given to another client");
    if (typeof claims.exp !== "number" || claims.exp * 1000 + clockSkewMs < now) throw new SsoError("the ID token has expired: start the sign-in again");
    if (claims.nonce !== nonce) throw new SsoError("the ID token is not this sign-in's (its nonce differs): start it again");
    if (typeof claims.email !== "string" || !claims.email.includes("@"))
      throw new SsoError("the identity provider gave no email (is the `email` scope allowed for this client?)");
    if (claims.email_verified === false) throw new SsoError(`the identity provider has not verified ${claims.email}`);
    const email = claims.email.trim().toLowerCase();
    const domain = email.slice(email.lastIndexOf("@") + 1);
    const allowed = this.settings.allowedDomains;
    if (allowed.length > 0 && !allowed.includes(domain)) throw new SsoError(`${email} is not of a domain this console accepts (${allowed.join(", ")})`);
    return email;
  }
}

/** The settings of `[console.sso]`, with its client secret read from `environment` or its file at each sign-in. */
export function ssoSettingsOf(config: SsoConfig, environment: Record<string, string | undefined> = process.env): SsoSettings {
  return {
    issuer: config.issuer,
    clientId: config.clientId,
    clientSecret: () => readSecret(config.clientSecret, "console.sso.client_secret", environment),
    redirectUrl: config.redirectUrl,
    allowedDomains: config.allowedDomains,
    label: config.label,
    passwords: config.passwords,
    organization: config.organization,
  };
}
