/**
 * The secret material of every adapter whose credential is a password (PostgreSQL, MariaDB,
 * Redis, RabbitMQ, NATS users): one way to make it, one way to read it back out of a request.
 */
import { ErrorCodes, MeshError, generateSecret } from "@mesh/shared";
import type { CreateRequest, SecretMaterial } from "./adapter.js";

/** Bytes of randomness in a generated password (base64url-encoded: 32 characters). */
export const PASSWORD_BYTES = 24;

/** Fresh secret material `{ password }` from the CSPRNG. */
export function generatePassword(): SecretMaterial {
  return { password: generateSecret(PASSWORD_BYTES) };
}

/** The password of a create request; throws `InvalidRequest` when the material has none. */
export function passwordOf(req: CreateRequest): string {
  const password = req.secret.password;
  if (typeof password !== "string" || password === "") {
    throw new MeshError(ErrorCodes.InvalidRequest, `secret material of ${req.grant.module}/${req.grant.requirement} has no password; make it with generate()`);
  }
  return password;
}
