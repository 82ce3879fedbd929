// Console tokens: made and revoked here, for scripts that drive the console API with `Authorization: Bearer`.
import { useEffect, useState } from "preact/hooks";
import { api } from "./api";
import { ErrorText } from "./error-text";
import { shownTime } from "./time";
import { ExpiryField, secretStatus, ShownOnce, useNewSecret } from "./new-secret";

interface Token {
  id: string;
  name: string;
  email: string;
  prefix: string;
  createdAt: number;
  expiresAt: number | null;
  revokedAt: number | null;
  lastUsedAt: number | null;
}

export function TokensPage({ operator }: { operator: boolean }) {
  const [tokens, setTokens] = useState<Token[]>([]);
  const { created, dismiss, error, setError, make } = useNewSecret(() => load());
  const load = () => api<Token[]>("/tokens").then(setTokens, (caught: Error) => setError(caught.message));
  useEffect(() => void load(), []);
  const create = (event: Event) => {
    event.preventDefault();
    const form = event.target as HTMLFormElement;
    const fields = new FormData(form);
    const body = { name: fields.get("name"), expires_in: fields.get("expires_in") || undefined };
    void make(async () => {
      const result = await api<{ token: Token; secret: string }>("/tokens", body);
      return { secret: result.secret, name: result.token.name };
    }, form);
  };
  const revoke = async (token: Token) => {
    if (!confirm(`Revoke the console token "${token.name}"? Scripts using it stop working at once.`)) return;
    await api(`/tokens/${token.id}/revoke`, {}).catch((caught: Error) => setError(caught.message));
    await load();
  };
  return (
    <section aria-labelledby="tokens-title">
      <h2 id="tokens-title">Console tokens</h2>
      <p>
        For scripts that use the console API (<code>/console/api</code>) with <code>Authorization: Bearer</code>: a token can do what you can do here. It is not
        an API key for the models.
      </p>
      {created && <ShownOnce what="console token" name={created.name} secret={created.secret} onDone={dismiss} />}
      <form onSubmit={create}>
        <label>
          Name
          <input name="name" required maxLength={100} />
        </label>
        <ExpiryField />
        <button class="primary" type="submit">
          Create token
        </button>
      </form>
      <ErrorText error={error} />
      <div class="table-wrap">
        <table>
          <caption class="visually-hidden">{operator ? "Every account's console tokens" : "Your console tokens"}</caption>
          <thead>
            <tr>
              <th scope="col">Name</th>
              {operator && <th scope="col">Account</th>}
              <th scope="col">Prefix</th>
              <th scope="col">Created</th>
              <th scope="col">Last used</th>
              <th scope="col">Expires</th>
              <th scope="col">Status</th>
              <th scope="col" />
            </tr>
          </thead>
          <tbody>
            {tokens.map((token) => (
              <tr key={token.id}>
                <td>{token.name}</td>
                {operator && <td>{token.email}</td>}
                <td>
                  <code>{token.prefix}…</code>
                </td>
                <td>{shownTime(token.createdAt)}</td>
                <td>{shownTime(token.lastUsedAt)}</td>
                <td>{shownTime(token.expiresAt)}</td>
                <td>{secretStatus(token)}</td>
                <td>
                  {!token.revokedAt && (
                    <button type="button" onClick={() => revoke(token)} aria-label={`Revoke ${token.name}`}>
                      Revoke
                    </button>
                  )}
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      </div>
    </section>
  );
}
