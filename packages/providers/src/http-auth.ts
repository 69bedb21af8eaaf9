/** HTTP authentication for the adapters that speak to a registry: Basic credentials and the Bearer challenge a registry answers with. */

/** The `authorization` header value of HTTP Basic for `user` and `password`. */
export function basicAuthorization(user: string, password: string): string {
  return `Basic ${Buffer.from(`${user}:${password}`).toString("base64")}`;
}

/** A registry's Bearer challenge: where to ask for a token (`realm`, a URL), for which service, and the scope the request needed. */
export interface BearerChallenge {
  realm: string;
  service: string;
  scope?: string;
}

/** `Bearer realm="…",service="…"[,scope="…"]` → its parameters; undefined for anything else (no realm or service, or a realm that is not a URL). */
export function parseBearerChallenge(header: string): BearerChallenge | undefined {
  if (!/^bearer\s/i.test(header)) return undefined;
  const params = Object.fromEntries([...header.matchAll(/([a-z]+)="([^"]*)"/gi)].map((m) => [m[1]!.toLowerCase(), m[2]!]));
  if (!params.realm || !params.service) return undefined;
  try {
    new URL(params.realm);
  } catch {
    return undefined;
  }
  return { realm: params.realm, service: params.service, ...(params.scope ? { scope: params.scope } : {}) };
}
