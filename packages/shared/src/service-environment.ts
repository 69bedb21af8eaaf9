/**
 * What each service's `--help` says: what it is for, its command line, the environment
 * variables it reads and its exit codes. docs/reference/services.md says the same at length
 * (test/service-help.test.ts keeps the two naming the same variables). `serviceCommandLine`
 * answers `--help` and `--version` before anything connects, and refuses anything else.
 */
import { parseArgs } from "node:util";
import { errorMessage } from "./errors.js";

/** The services, by the name each runs as (`mesh-<name>`). */
export type ServiceName = "resolver" | "provisioner" | "verifier" | "rotator" | "agent" | "oci-token-issuer";

/** What every service on NATS reads. */
const ON_NATS: Record<string, string> = {
  NATS_URL: "the NATS server, or a cluster's servers separated by commas (default nats://127.0.0.1:4222)",
  MESH_NATS_CREDENTIALS: "the identity to connect as: a .creds file, or the directory of a nats.user binding (read again at every reconnect)",
  MESH_NATS_USER: "with MESH_NATS_PASSWORD_FILE or MESH_NATS_PASSWORD: a user and password instead, on a server with plain users",
  MESH_NATS_CA_FILE:
    "a PEM bundle to verify the server's TLS certificate against (else the ca.crt of the MESH_NATS_CREDENTIALS binding); with one, TLS is required",
  MESH_REPLICAS: "replicas of the buckets and streams it makes (default 3 on a cluster of three or more servers, else 1)",
};

const LOGS_AND_TRACES: Record<string, string> = {
  MESH_LOG_LEVEL: "trace, debug, info (default), warn, error or fatal",
  OTEL_EXPORTER_OTLP_ENDPOINT:
    "where its spans go over OTLP/HTTP (none when unset); OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES as OpenTelemetry reads them",
};

const MASTER_KEY: Record<string, string> = {
  MESH_MASTER_KEY: "the master key, 64 hex characters (else MESH_MASTER_KEY_FILE)",
  MESH_MASTER_KEY_FILE: "the master key's file (default master.key in MESH_STATE_DIR; the provisioner makes it, 0600, when missing)",
};

/** Where a provider's admin password may come from (docs/reference/manifest.md, Admin password sources). */
const ADMIN_PASSWORD_SOURCES: Record<string, string> = {
  MESH_STATE_DIR:
    "the mesh's state directory (default .mesh): no provider's passwordFile may lie in it, and a provider's tls: { mesh: true } takes the authority's bundle from its mesh-ca/ca.crt",
  MESH_OPERATOR_DIR: "the NATS operator's directory: a passwordFile may name only its admin.creds there, for a provider of NATS kinds",
  MESH_BINDINGS_ROOT: "the agents' bindings root: a passwordFile may lie there only in a grant its provider needs",
  MESH_ADMIN_PASSWORD_FILES: "the directories or files a provider's passwordFile must be, or lie under, separated by ':' (no narrowing when unset)",
  MESH_ADMIN_PASSWORD_ENVS: "the variables a provider's passwordEnv may name, separated by ',' (else any ending in _PASSWORD, not MESH_*)",
};

/** Each service: what it is for, and the variables it reads beyond those every service on NATS reads. */
export const SERVICES: Readonly<Record<ServiceName, { about: string; environment: Readonly<Record<string, string>> }>> = {
  resolver: {
    about: "takes manifests (apply, delete) and resolves each requirement to a provider",
    environment: { ...ON_NATS, ...ADMIN_PASSWORD_SOURCES, ...LOGS_AND_TRACES },
  },
  provisioner: {
    about: "makes what each grant needs on its provider, generates its credential and announces it to the parts that need it",
    environment: { ...ON_NATS, ...MASTER_KEY, ...ADMIN_PASSWORD_SOURCES, ...LOGS_AND_TRACES },
  },
  verifier: {
    about: "checks every grant again and again (the resource is there, the credential logs in, from where its holders run) and repairs drift",
    environment: {
      ...ON_NATS,
      ...MASTER_KEY,
      ...ADMIN_PASSWORD_SOURCES,
      MESH_VERIFY_INTERVAL: "how often a grant is checked unless its requirement says (default 10s)",
      ...LOGS_AND_TRACES,
    },
  },
  rotator: {
    about: "rotates grants: the new generation to every holder, confirmed by each, and only then the old one retired",
    environment: {
      ...ON_NATS,
      ...MASTER_KEY,
      ...ADMIN_PASSWORD_SOURCES,
      MESH_ROTATION_TIMEOUT: "how long the holders have to confirm before the rotation is Stalled (default 5m)",
      MESH_CREDENTIAL_HISTORY: "generations of a credential the store keeps (default 5)",
      ...LOGS_AND_TRACES,
    },
  },
  agent: {
    about: "one per node: writes the values delivered to the parts on its node, probes them, and confirms rotations",
    environment: {
      ...ON_NATS,
      MESH_NODE: "the node's name, as the manifests place parts (as --node)",
      MESH_BINDINGS_ROOT: "where it writes the parts' bindings (as --bindings)",
      MESH_PROBE_INTERVAL: "how often it logs in with what it delivered and checks that providers answer from its node (default 10s)",
      MESH_ALLOW_HOOKS: "the hooks parts' onRotate may name, NAME=COMMAND separated by ';' (as --allow-hook)",
      MESH_HOOK_USER: "who the hooks run as (default nobody; as --hook-user)",
      ...LOGS_AND_TRACES,
    },
  },
  "oci-token-issuer": {
    about: "the token server of a distribution registry that serves oci.registry (it talks to no NATS)",
    environment: {
      MESH_OCI_ISSUER_LISTEN: "host:port it listens on (default 127.0.0.1:5001; beyond loopback only with MESH_OCI_ISSUER_TLS_DIR)",
      MESH_OCI_ISSUER_TLS_DIR: "a directory with tls.crt and tls.key (a tls.certificate binding): serve HTTPS, reading a renewed certificate within 2 s",
      MESH_OCI_ISSUER_STATE_DIR: "its signing key and certificate, users and admin password (default /var/lib/mesh-oci-token-issuer)",
      MESH_OCI_ISSUER_ADMIN_USER: "the admin the provisioner logs in as (default mesh-admin)",
      MESH_OCI_ISSUER_ADMIN_PASSWORD_FILE: "the admin's password file (default admin-password in its state directory, made on first start)",
      MESH_OCI_SERVICE: "the registry's auth.token.service (default mesh-registry)",
      MESH_OCI_ISSUER_NAME: "the registry's auth.token.issuer (default mesh-oci-token-issuer)",
      MESH_OCI_TOKEN_LIFETIME: "how long a token lives, in seconds, 1 to 60 (default 60)",
      MESH_LOG_LEVEL: LOGS_AND_TRACES.MESH_LOG_LEVEL!,
    },
  },
};

/** What every service's exit code means. */
const EXIT_CODES = "Exit codes: 0 after SIGINT or SIGTERM, 1 when it cannot start or fails for good (the log says why), 2 wrong usage.";

/** The command line of a service that takes no argument of its own. */
const PLAIN_USAGE = (name: ServiceName) => `usage: mesh-${name} [--help] [--version]`;

/** `mesh-<name> --help`: what it is for, `usage`, the variables it reads (aligned), the exit codes. */
export function serviceHelp(name: ServiceName, usage = PLAIN_USAGE(name)): string {
  const { about, environment } = SERVICES[name];
  const width = Math.max(...Object.keys(environment).map((k) => k.length));
  return [
    `mesh-${name}: ${about}.`,
    "",
    usage,
    "",
    "Environment:",
    ...Object.entries(environment).map(([k, v]) => `  ${k.padEnd(width)}  ${v}`),
    "",
    EXIT_CODES,
    "",
  ].join("\n");
}

/**
 * The command line of a service that takes no argument of its own: `--help` prints
 * {@link serviceHelp} and exits 0, `--version` prints `version` and exits 0, anything else is
 * refused with the usage (exit 2). Returns when there is none, before anything connects.
 */
export function serviceCommandLine(name: ServiceName, version: string | undefined, argv = process.argv.slice(2)): void {
  let values: { help?: boolean; version?: boolean };
  try {
    values = parseArgs({
      args: argv,
      options: { help: { type: "boolean", short: "h" }, version: { type: "boolean" } },
      strict: true,
      allowPositionals: false,
    }).values;
  } catch (e) {
    process.stderr.write(`mesh-${name}: ${errorMessage(e)}\n${PLAIN_USAGE(name)}   (it is configured by its environment: mesh-${name} --help lists it)\n`);
    process.exit(2);
  }
  if (values.help) {
    process.stdout.write(serviceHelp(name));
    process.exit(0);
  }
  if (values.version) {
    process.stdout.write(`${version ?? "unknown"}\n`);
    process.exit(0);
  }
}
