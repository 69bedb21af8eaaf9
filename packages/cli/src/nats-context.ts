/**
 * Where and as whom meshctl connects when told: `--creds FILE` (or `NATS_CREDS`), and a context of
 * the `nats` CLI named by `--context NAME` (or `NATS_CONTEXT`): its JSON file under
 * `$XDG_CONFIG_HOME/nats/context/` (`~/.config/nats/context/` by default), as `nats context add`
 * writes it. A context is used only when named, never the one `nats context select` chose, so
 * meshctl in a mesh's directory keeps taking that mesh's operator credentials.
 */
import { readFileSync } from "node:fs";
import { homedir } from "node:os";
import { join } from "node:path";
import { errorMessage } from "@mesh/shared";
import { CliError } from "./cli-error.js";
import { ExitCodes } from "./exit-codes.js";

/** What meshctl takes of a `nats` CLI context. */
export interface NatsContext {
  name: string;
  file: string;
  url?: string;
  creds?: string;
  user?: string;
  password?: string;
  token?: string;
  inboxPrefix?: string;
  /** The bundle the server's TLS certificate is verified against. */
  ca?: string;
}

/** The identity the command line names, before the environment's and the state directory's. */
export interface ChosenIdentity {
  /** `--creds` or `NATS_CREDS`: a `.creds` file, or a `nats.user` binding directory. */
  creds?: string;
  context?: NatsContext;
}

/** Fields of a context meshctl cannot use; named in the refusal rather than ignored. */
const UNSUPPORTED = ["nkey", "cert", "key", "user_jwt", "nsc", "jetstream_domain", "jetstream_api_prefix"] as const;

/** The context file of `name`. */
export function natsContextFile(name: string, env: NodeJS.ProcessEnv = process.env): string {
  const config = env.XDG_CONFIG_HOME || join(env.HOME || homedir(), ".config");
  return join(config, "nats", "context", `${name}.json`);
}

/** Reads context `name`, refusing with what to do when it cannot be read or asks for what meshctl does not do. */
export function readNatsContext(name: string, env: NodeJS.ProcessEnv = process.env): NatsContext {
  // The name becomes a file name: nothing that leaves the context directory.
  if (!/^[A-Za-z0-9_-][A-Za-z0-9_.-]*$/.test(name)) {
    throw new CliError(`--context ${JSON.stringify(name)}: not a context name (letters, digits, ".", "_" and "-", not starting with ".")`, ExitCodes.Usage);
  }
  const file = natsContextFile(name, env);
  let raw: Record<string, unknown>;
  try {
    raw = JSON.parse(readFileSync(file, "utf8")) as Record<string, unknown>;
  } catch (e) {
    const missing = (e as NodeJS.ErrnoException).code === "ENOENT";
    throw new CliError(
      missing
        ? `NATS context ${name} does not exist: no ${file}. Make it with: nats context add ${name} --server URL --creds FILE (or name another with --context)`
        : `NATS context ${name}: cannot read ${file} (${errorMessage(e)}); it must be the JSON that nats context add writes`,
      ExitCodes.Usage,
      { cause: e },
    );
  }
  const unsupported = UNSUPPORTED.filter((k) => typeof raw[k] === "string" && raw[k] !== "");
  if (unsupported.length) {
    throw new CliError(
      `NATS context ${name} (${file}) sets ${unsupported.join(", ")}, which meshctl does not use; give meshctl a .creds file with --creds, or a context with creds, user and password, or token`,
      ExitCodes.Usage,
    );
  }
  const str = (k: string) => (typeof raw[k] === "string" && raw[k] !== "" ? (raw[k] as string) : undefined);
  return {
    name,
    file,
    ...(str("url") ? { url: str("url") } : {}),
    // As the nats CLI reads it: a leading ~ is the home directory.
    ...(str("creds") ? { creds: str("creds")!.replace(/^~(?=\/|$)/, env.HOME || homedir()) } : {}),
    ...(str("user") ? { user: str("user") } : {}),
    ...(str("password") ? { password: str("password") } : {}),
    ...(str("token") ? { token: str("token") } : {}),
    ...(str("inbox_prefix") ? { inboxPrefix: str("inbox_prefix") } : {}),
    ...(str("ca") ? { ca: str("ca")!.replace(/^~(?=\/|$)/, env.HOME || homedir()) } : {}),
  };
}
