/**
 * SCRAM-SHA-256 password verifiers (RFC 5802/7677), in the form PostgreSQL stores them.
 *
 * Why: `ALTER ROLE … PASSWORD '<verifier>'` stores a pre-hashed password as it is, so the
 * plaintext never reaches the server, its statement log or pg_stat_statements (as psql's
 * `\password` does).
 */
import { createHash, createHmac, pbkdf2Sync, randomBytes } from "node:crypto";

/** PostgreSQL's default iteration count (`scram_iterations`). */
export const SCRAM_ITERATIONS = 4096;

/**
 * `SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>` for `password`, with a fresh
 * random salt unless one is given. The password is used as UTF-8 without SASLprep, which is
 * exact for the ASCII passwords the mesh generates.
 */
export function scramSha256Verifier(password: string, salt: Buffer = randomBytes(16), iterations = SCRAM_ITERATIONS): string {
  const salted = pbkdf2Sync(Buffer.from(password, "utf8"), salt, iterations, 32, "sha256");
  const clientKey = createHmac("sha256", salted).update("Client Key").digest();
  const storedKey = createHash("sha256").update(clientKey).digest();
  const serverKey = createHmac("sha256", salted).update("Server Key").digest();
  return `SCRAM-SHA-256$${iterations}:${salt.toString("base64")}$${storedKey.toString("base64")}:${serverKey.toString("base64")}`;
}
