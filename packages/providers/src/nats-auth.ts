/**
 * How an adapter authenticates to a NATS server as a provider's admin: a decorated `.creds`
 * file (the admin's `passwordFile` holds one, on a server whose operator is the mesh), or a
 * user name and password otherwise.
 */
import type { ConnectionOptions } from "@nats-io/transport-node";
import { jwtAuthenticator } from "@mesh/shared/runtime";
import type { ProviderConfig } from "./adapter.js";
import { isCreds } from "./nats-jwt.js";

/** Connection options for `admin`: its `.creds`, its user and password, or nothing. */
export function natsAuth(admin: ProviderConfig["admin"]): Partial<ConnectionOptions> {
  if (!admin?.password) return admin?.username ? { user: admin.username } : {};
  // The password file's last newline was taken off; the client's parser needs the one after the seed's end line.
  if (isCreds(admin.password)) return { authenticator: jwtAuthenticator(new TextEncoder().encode(`${admin.password}\n`)) };
  return { user: admin.username, pass: admin.password };
}
