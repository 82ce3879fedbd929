// Making a secret (an API key, a console token): its expiry field, and the secret shown this once with a copy button
// (the server keeps only its hash).
import { useState } from "preact/hooks";
import { useFormAction } from "./form-action";

export function ShownOnce({ what, name, secret, onDone }: { what: string; name: string; secret: string; onDone: () => void }) {
  const [copied, setCopied] = useState(false);
  return (
    <div class="notice" role="status" aria-live="polite">
      <p>
        <strong>
          Copy your new {what} "{name}" now.
        </strong>{" "}
        It is shown this once and never again.
      </p>
      <p class="secret" data-testid={`new-${what.replace(/\s+/g, "-")}`}>
        {secret}
      </p>
      <button
        type="button"
        onClick={async () => {
          await navigator.clipboard?.writeText(secret).catch(() => undefined);
          setCopied(true);
        }}
      >
        {copied ? "Copied" : "Copy"}
      </button>{" "}
      <button type="button" onClick={onDone}>
        I have stored it
      </button>
    </div>
  );
}

/** The form field for `expires_in`: never, or after one of a few periods. */
export function ExpiryField() {
  return (
    <label>
      Expires after (optional)
      <select name="expires_in">
        <option value="">Never</option>
        <option value="1d">1 day</option>
        <option value="30d">30 days</option>
        <option value="90d">90 days</option>
      </select>
    </label>
  );
}

/** What a key or token is now: revoked, expired or active. */
export function secretStatus(secret: { revokedAt: number | null; expiresAt: number | null }): string {
  if (secret.revokedAt) return "revoked";
  return secret.expiresAt && secret.expiresAt < Date.now() ? "expired" : "active";
}

/** A secret just made, for ShownOnce. */
export interface NewSecret {
  secret: string;
  name: string;
}

/**
 * Making secrets from a page: `make` runs what makes one, then shows it once, clears the form it came from and reloads
 * the list; or shows the error instead.
 */
export function useNewSecret(reload: () => Promise<unknown>) {
  const [created, setCreated] = useState<NewSecret | null>(null);
  const { error, setError, run } = useFormAction();
  const make = (send: () => Promise<NewSecret>, form?: HTMLFormElement) =>
    run(async () => {
      setCreated(await send());
      await reload();
    }, form);
  return { created, dismiss: () => setCreated(null), error, setError, make };
}
