/** The issuer's admin password: read from its file, or made there (mode 0600) on first start. */
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { generateSecret } from "@mesh/shared";

/** The password in `file`, trimmed; a new random one written there with mode 0600 when the file does not exist. */
export function ensureAdminPassword(file: string): string {
  if (!existsSync(file)) writeFileSync(file, `${generateSecret(32)}\n`, { mode: 0o600, flag: "wx" });
  const password = readFileSync(file, "utf8").trim();
  if (password === "") throw new Error(`${file} is empty; write the admin password in it, or remove it to have one made`);
  return password;
}
